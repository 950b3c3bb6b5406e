package riverutil_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/internal/riverslottest"
	"github.com/riverslot/riverslot/riverutil"
)

// startApp is what an app writes to slot-schedule a task on its own River
// client. The lines between the "quick start" markers are the README's
// quick start, word for word (TestReadmeQuickStart checks it).
func startApp(ctx context.Context, dbPool *pgxpool.Pool, logger *slog.Logger, accountsSchema, riverSchema string,
	syncTransactions func(context.Context, uuid.UUID) error,
) (*river.Client[pgx.Tx], error) {
	// --- quick start ---
	scheduler, err := riverutil.New(dbPool, &riverutil.Config{Tasks: []riverutil.Task{{
		Name:   "transactions",
		Cycle:  32 * time.Second, // 24 * time.Hour in production: 128 slots of 11m15s
		Schema: accountsSchema,   // the accounts table's schema; "" for search_path
		Table:  "accounts",
		Filter: "active",
		Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverutil.SyncArgs]) error {
			return syncTransactions(ctx, accountID)
		},
	}}})
	if err != nil {
		return nil, err
	}
	if err := scheduler.Check(ctx); err != nil { // table, uuid column, filter: read-only
		return nil, err
	}
	config := &river.Config{
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
		Schema: riverSchema, // River's tables; "" for search_path
		Logger: logger,      // riverslot logs through it too
	}
	// Workers, the periodic trigger, RescueStuckJobsAfter and
	// CompletedJobRetentionPeriod; refuses values that break the guarantees.
	if err := scheduler.Configure(config); err != nil {
		return nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(dbPool), config)
	// --- end of quick start ---
	return client, err
}

// Example_quickStart runs the README's quick start (startApp) against a
// throwaway schema with 3 accounts, and waits until each is synced. A 32 s
// cycle keeps it short: accounts whose slot has passed when the app starts
// are synced in the next cycle.
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

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})) // quiet
	client, err := startApp(ctx, dbPool, logger, schema, schema, syncTransactions)
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}

	select {
	case <-allSynced:
		fmt.Println("all 3 accounts synced")
	case <-time.After(2 * time.Minute):
		fmt.Println("timed out")
	}
	if err := client.Stop(ctx); err != nil {
		panic(err)
	}

	// Output:
	// all 3 accounts synced
}
