package riverutil_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/internal/riverslottest"
	"github.com/riverslot/riverslot/riverutil"
	"github.com/riverslot/riverslot/syncjob"
)

// Example_quickStart registers a slot-scheduled task on an app's own River
// client. Everything between the two "app code" comments is what an app
// writes; the rest prepares a throwaway schema for the example.
func Example_quickStart() {
	ctx := context.Background()
	tb := riverslottest.PanicTB() // test-only scaffolding: a throwaway schema with 3 accounts
	dbPool := riverslottest.Pool(tb)
	schema := riverslottest.Schema(ctx, tb, dbPool)
	defer dropSchema(dbPool, schema)
	riverslottest.CreateAccounts(ctx, tb, dbPool, schema, "accounts", 3)

	var (
		mu     sync.Mutex
		synced = map[uuid.UUID]bool{}
		done   = make(chan struct{})
	)
	syncTransactions := func(ctx context.Context, accountID uuid.UUID) error {
		mu.Lock()
		defer mu.Unlock()
		if synced[accountID] = true; len(synced) == 3 && done != nil {
			close(done)
			done = nil
		}
		return nil
	}
	allSynced := done

	// --- app code ---
	plugin, err := riverutil.New(dbPool, &riverutil.Config{Tasks: []riverutil.Task{{
		Name:   "transactions",
		Cycle:  4 * time.Second, // 24 * time.Hour in production; 4s (2 slots of 2s) keeps the example quick
		Schema: schema, Table: "accounts", Filter: "active",
		Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[syncjob.Args]) error {
			return syncTransactions(ctx, accountID)
		},
	}}})
	if err != nil {
		panic(err)
	}
	workers := river.NewWorkers()
	if err := plugin.AddWorkers(workers); err != nil {
		panic(err)
	}
	client, err := river.NewClient(riverpgxv5.New(dbPool), &river.Config{
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:      workers,
		PeriodicJobs: plugin.PeriodicJobs(),
		Schema:       schema,                                                                                // only for the example's throwaway schema
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), // quiet
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	// --- end of app code ---

	select {
	case <-allSynced:
		fmt.Println("all 3 accounts synced")
	case <-time.After(30 * time.Second):
		fmt.Println("timed out")
	}
	if err := client.Stop(ctx); err != nil {
		panic(err)
	}

	// Output:
	// all 3 accounts synced
}
