// Package shardscmd is riverslot shards: a task's shards (databases, each
// with its own River), their maps and latest cycles, and changes to the
// task's shard map.
//
// The command parses and checks its flags, connects every shard's pool and
// calls Show or Set, mapping an *inspect.InputError to its exit code for bad
// input:
//
//	err := shardscmd.Show(ctx, os.Stdout, shards, "transactions", false)
//	err = shardscmd.Set(ctx, &shardscmd.SetConfig{Shards: shards, Task: "transactions",
//		Move: &shardscmd.Move{Lo: 0, Hi: 1023, To: "b"}, From: from}, os.Stdout)
package shardscmd
