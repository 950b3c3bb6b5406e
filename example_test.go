package riverslot_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// Example wires a task into a River client in the order that needs no
// warning: Migrate, New, CreateIndexes, Check, Configure. The complete
// program, which also starts the client, is examples/quickstart (the
// README's quick start).
func Example() {
	ctx := context.Background()
	tb := riverslottest.PanicTB() // test-only scaffolding: a throwaway schema with 3 accounts
	dbPool := riverslottest.Pool(tb)
	schema := riverslottest.EmptySchema(ctx, tb, dbPool)
	defer dropSchema(dbPool, schema)
	riverslottest.CreateAccounts(ctx, tb, dbPool, schema, "accounts", 3)
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level:       slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return dropTime(a) },
	}))

	if err := riverslot.Migrate(ctx, dbPool, schema); err != nil { // River's tables
		panic(err)
	}
	scheduler, err := riverslot.New(dbPool, &riverslot.Config{
		Logger: logger, // Check's warnings, and the workers' logs
		Tasks: []riverslot.Task{{
			Name:   "transactions",
			Cycle:  24 * time.Hour,
			Schema: schema,
			Table:  "accounts",
			Filter: "active",
			Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
				return nil // the app's work for one account
			},
		}},
	})
	if err != nil {
		panic(err)
	}
	if err := scheduler.CreateIndexes(ctx); err != nil { // the bucket index
		panic(err)
	}
	if err := scheduler.Check(ctx); err != nil { // read-only; warns through Logger
		panic(err)
	}
	config := &river.Config{
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
		Schema: schema,
		Logger: logger,
	}
	if err := scheduler.Configure(config); err != nil {
		panic(err)
	}
	if _, err := river.NewClient(riverpgxv5.New(dbPool), config); err != nil {
		panic(err)
	}

	task, err := scheduler.Task("transactions")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d slots of %s, per-slot jobs %s ahead of their slot\n", task.Plan.Slots, task.Plan.SlotDuration, task.Lead)
	fmt.Println("RescueStuckJobsAfter:", config.RescueStuckJobsAfter)

	// Output:
	// 128 slots of 11m15s, per-slot jobs 10s ahead of their slot
	// RescueStuckJobsAfter: 2m0s
}

// Example_check shows Check's warnings going to Config.Logger: here the
// bucket index is missing (CreateIndexes was not run), and a 15 minute
// cycle has only 4 slots.
func Example_check() {
	ctx := context.Background()
	tb := riverslottest.PanicTB()
	dbPool := riverslottest.Pool(tb)
	schema := riverslottest.EmptySchema(ctx, tb, dbPool)
	defer dropSchema(dbPool, schema)
	riverslottest.CreateAccounts(ctx, tb, dbPool, schema, "accounts", 3)
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == "schema" || a.Key == "ddl" {
				return slog.Attr{} // names the throwaway schema
			}
			return dropTime(a)
		},
	}))

	scheduler, err := riverslot.New(dbPool, &riverslot.Config{
		Logger: logger,
		Tasks: []riverslot.Task{{
			Name:   "reports",
			Cycle:  15 * time.Minute,
			Schema: schema,
			Table:  "accounts",
			Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
				return nil
			},
		}},
	})
	if err != nil {
		panic(err)
	}
	if err := scheduler.Check(ctx); err != nil {
		panic(err)
	}

	// Output:
	// level=WARN msg="riverslot: few slots; each slot's accounts are queued at once, a large share of the table. Use a Cycle whose seconds have more factors of 2" task=reports cycle=15m0s slots=4 suggested_cycle=14m56s suggested_slots=128
	// level=WARN msg="riverslot: bucket index missing; per-slot selection will scan the whole table. Create it with Scheduler.CreateIndexes or sqlbucket.IndexDDL" task=reports buckets=256
}

// dropTime removes the time from log lines, so that examples can show them.
func dropTime(a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
