// Package shardscmd is riverslot shards: a task's shards (databases, each
// with its own River), their maps and latest cycles, and changes to the
// task's shard map: set, move, add (new shards join), repair (every
// shard brought to one map after a change written on some only) and
// rebalance (moves on slot bounds to weighted shares); and copy-accounts,
// a moving range's accounts copied from one shard's table to another's.
//
// The command parses and checks its flags, connects every shard's pool and
// calls Show, Set, Add, Repair, Rebalance or CopyAccounts, mapping an
// *inspect.InputError to its exit code for bad input:
//
//	err := shardscmd.Show(ctx, os.Stdout, shards, "transactions", false)
//	err = shardscmd.Set(ctx, &shardscmd.SetConfig{Shards: shards, Task: "transactions",
//		Move: &shardscmd.Move{Lo: 0, Hi: 1023, To: "b"}, From: from}, os.Stdout)
//	err = shardscmd.Repair(ctx, &shardscmd.RepairConfig{Shards: shards, Task: "transactions"}, os.Stdout)
//	_, err = shardscmd.CopyAccounts(ctx, &shardscmd.CopyConfig{Shards: shards, Task: "transactions",
//		From: "a", To: "b", Lo: 0, Hi: 1023, Schema: "public", Table: "accounts", Progress: os.Stderr}, os.Stdout)
package shardscmd
