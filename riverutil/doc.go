// Package riverutil is riverslot's River glue and its user-facing entry
// point: it validates tasks, registers the bootstrap, per-slot and sync
// workers on an app's river.Workers, provides the periodic triggers for
// river.Config.PeriodicJobs, checks the accounts tables at start-up, creates
// the bucket indexes, and runs River's migrations.
//
// A task syncs every account of a table once per cycle:
//
//	plugin, err := riverutil.New(dbPool, &riverutil.Config{Tasks: []riverutil.Task{{
//		Name:   "transactions",
//		Cycle:  24 * time.Hour, // 128 slots of 11m15s
//		Table:  "accounts",
//		Filter: "active AND NOT restricted",
//		Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[syncjob.Args]) error {
//			return syncTransactions(ctx, accountID)
//		},
//	}}})
//	workers := river.NewWorkers()
//	err = plugin.AddWorkers(workers)
//	client, err := river.NewClient(riverpgxv5.New(dbPool), &river.Config{
//		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
//		Workers:      workers,
//		PeriodicJobs: plugin.PeriodicJobs(),
//	})
//
// Several tasks share one client: each has its own name, cycle, sync kind and
// queues, and every job's args carry the task name.
//
// Data flows trigger → bootstrap → perslot → syncjob; the schedule math lives
// in slotplan and the SQL predicate in sqlbucket.
package riverutil
