// Package riverslot is riverslot's entry point and its River glue: it
// validates tasks into one spec each, wires the bootstrap, per-slot and sync
// workers and the periodic triggers into an app's river.Config, checks the
// accounts tables at start-up, creates the bucket indexes, and runs River's
// migrations. It is the only package an app needs to import.
//
// A task syncs every account of a table once per cycle. At start-up, in
// this order (each step is safe to repeat):
//
//	err := riverslot.Migrate(ctx, dbPool, "river") // River's tables; creates the schema if missing
//	scheduler, err := riverslot.New(dbPool, &riverslot.Config{
//		Logger: logger, // Check's warnings and riverslot's logs
//		Tasks: []riverslot.Task{{
//			Name:   "transactions",
//			Cycle:  24 * time.Hour, // 128 slots of 11m15s
//			Schema: "app",
//			Table:  "accounts", // a uuid column "id"
//			Filter: "active AND NOT restricted",
//			Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
//				return syncTransactions(ctx, accountID)
//			},
//		}},
//	})
//	err = scheduler.CreateIndexes(ctx) // the bucket index (and a weighted task's pins tables)
//	err = scheduler.Check(ctx)         // read-only: table, uuid column, filter, the exact queries
//	config := &river.Config{
//		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
//		Schema: "river",
//		Logger: logger,
//	}
//	err = scheduler.Configure(config) // workers, triggers, RescueStuckJobsAfter
//	client, err := river.NewClient(riverpgxv5.New(dbPool), config)
//
// The complete program is examples/quickstart in the repository (the
// README's quick start). New reports every problem of every task at once,
// each naming the task, the field and the fix; Check does the same for what
// only the database can tell.
//
// Several tasks share one client: each has its own name, cycle and queues,
// and every job's args carry the task name.
//
// Pick a Cycle with many slots: a cycle has gcd(seconds, 256) slots (24 h
// gives 128, 15 min only 4), and the queue holds about one slot's accounts
// at a time. Check warns below 8 slots.
//
// Data flows trigger → bootstrap → perslot → syncjob; the schedule math lives
// in slotplan and the SQL predicate in sqlbucket. The repository's docs/
// folder has the guarantees with their tests, operations (status, metrics,
// re-running a slot, changing Cycle or Seed, least privilege), weights and
// phases, the simulator, and performance figures.
package riverslot
