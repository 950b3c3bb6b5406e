// Package inspect reads where riverslot's tasks stand, for riverslot status
// and riverslot web: it checks that a schema holds River's tables and
// riverslot's ledger, finds the tasks the ledger records, builds a
// scheduler that only reads, and writes a task's status (or a sharded
// task's) as text or as an SVG figure.
//
// The commands parse and check their flags, connect the pools, call these
// functions and map an *InputError to their exit code for bad input:
//
//	if err := inspect.CheckRiverSchema(ctx, pool, schema); err != nil {
//		return err
//	}
//	s, err := inspect.Scheduler(pool, "", schema, riverslot.Task{Name: "transactions", Cycle: 24 * time.Hour, Table: "accounts"})
//	if err != nil {
//		return err
//	}
//	st, err := s.Status(ctx, "transactions")
//	if err == nil {
//		inspect.WriteStatus(os.Stdout, st)
//	}
package inspect
