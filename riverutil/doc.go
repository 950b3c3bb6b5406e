// Package riverutil is riverslot's entry point and its River glue: it
// validates tasks into one spec each, wires the bootstrap, per-slot and sync
// workers and the periodic triggers into an app's river.Config, checks the
// accounts tables at start-up, creates the bucket indexes, and runs River's
// migrations. It is the only package an app needs to import.
//
// A task syncs every account of a table once per cycle:
//
//	scheduler, err := riverutil.New(dbPool, &riverutil.Config{Tasks: []riverutil.Task{{
//		Name:   "transactions",
//		Cycle:  24 * time.Hour, // 128 slots of 11m15s
//		Table:  "accounts",
//		Filter: "active AND NOT restricted",
//		Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverutil.SyncArgs]) error {
//			return syncTransactions(ctx, accountID)
//		},
//	}}})
//	err = scheduler.Check(ctx)
//	config := &river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}}}
//	err = scheduler.Configure(config) // workers, triggers, rescue and retention settings
//	client, err := river.NewClient(riverpgxv5.New(dbPool), config)
//
// Several tasks share one client: each has its own name, cycle and queues,
// and every job's args carry the task name.
//
// Data flows trigger → bootstrap → perslot → syncjob; the schedule math lives
// in slotplan and the SQL predicate in sqlbucket.
package riverutil
