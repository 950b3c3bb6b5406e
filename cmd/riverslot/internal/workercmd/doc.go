// Package workercmd is riverslot worker: one River client with one
// riverslot task (and with Reciprocal its opposite) over a schema that
// riverslot demo created, until the context ends. Several workers on one
// schema form a cluster; the fault tests start, stop and kill them.
//
// The command parses and checks its flags, binds the addresses it serves,
// connects the pools, refuses a schema the demo did not create with
// CheckSchema, and calls Run, mapping an *inspect.InputError to its exit
// code for bad input:
//
//	if err := workercmd.CheckSchema(ctx, pool, "riverslot_demo"); err != nil {
//		return err
//	}
//	err := workercmd.Run(ctx, &workercmd.Config{Pool: pool, Schema: "riverslot_demo",
//		Task: riverslot.Task{Name: "demo", Cycle: 2 * time.Minute, Table: "accounts"}, Workers: 20, Record: true}, os.Stdout, os.Stderr)
//
// The worker's Sync calls the account's upstream (Config.UpstreamURL) and
// records the sync in <Schema>.synced when that table exists.
package workercmd
