// Command quickstart syncs every active account of the table app.accounts
// once a day, spread evenly over the day, with riverslot on River.
//
//	DATABASE_URL=postgres://localhost:5432/app go run .
package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	dbPool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err == nil {
		err = run(ctx, dbPool, logger, "app", "river", 24*time.Hour, syncTransactions)
		dbPool.Close()
	}
	if err != nil {
		logger.Error("quickstart stopped", slog.Any("error", err))
		os.Exit(1)
	}
}

// syncTransactions is the app's work for one account, called once per
// cycle per account. Return an error to have River retry it.
func syncTransactions(ctx context.Context, accountID uuid.UUID) error {
	slog.InfoContext(ctx, "syncing", slog.String("account", accountID.String()))
	return nil
}

// run prepares the database and works the task until ctx is cancelled:
// accountsSchema holds the accounts table, riverSchema River's tables.
func run(ctx context.Context, dbPool *pgxpool.Pool, logger *slog.Logger, accountsSchema, riverSchema string,
	cycle time.Duration, sync func(context.Context, uuid.UUID) error,
) error {
	// River's tables (creating riverSchema if needed); safe to run on every start.
	if err := riverslot.Migrate(ctx, dbPool, riverSchema); err != nil {
		return err
	}
	scheduler, err := riverslot.New(dbPool, &riverslot.Config{
		Logger: logger,
		Tasks: []riverslot.Task{{
			Name:   "transactions",
			Cycle:  cycle, // 24 h: 128 slots of 11m15s
			Schema: accountsSchema,
			Table:  "accounts", // a uuid column "id"
			Filter: "active",   // optional SQL condition on the table's rows
			Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
				return sync(ctx, accountID)
			},
		}},
	})
	if err != nil {
		return err
	}

	config := &river.Config{
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
		Schema: riverSchema,
		Logger: logger,
	}
	// Workers, the periodic trigger and RescueStuckJobsAfter; refuses a
	// value that would break the guarantees.
	if err := scheduler.Configure(config); err != nil {
		return err
	}
	// The bucket index (CREATE INDEX CONCURRENTLY IF NOT EXISTS), then a
	// read-only check of the table, the id column, the filter, the ledger
	// and River's retention (Check runs after Configure to see them).
	if err := scheduler.CreateIndexes(ctx); err != nil {
		return err
	}
	if err := scheduler.Check(ctx); err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(dbPool), config)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopErr := client.Stop(context.WithoutCancel(ctx))
	// How the last sync jobs ended, counted since the last write (every
	// 500 ms), into the ledger Status and the page read.
	return errors.Join(stopErr, scheduler.FlushOutcomes(context.WithoutCancel(ctx)))
}
