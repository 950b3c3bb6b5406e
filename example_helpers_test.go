package riverslot_test

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
)

// prepareCycles makes the cycles of task starting at starts ahead of time,
// as Scheduler.EnqueueCycle does in an app: a River client configured by
// scheduler runs each cycle's bootstrap, which records the cycle (its
// placement and shard map included) and enqueues its per-slot jobs for
// their slot times. The client stops once the bootstraps have completed:
// the examples read what they decided, nothing runs later.
func prepareCycles(ctx context.Context, dbPool *pgxpool.Pool, scheduler *riverslot.Scheduler, schema, task string, starts ...time.Time) {
	config := &river.Config{
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}},
		Schema: schema,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if err := scheduler.Configure(config); err != nil {
		panic(err)
	}
	config.PeriodicJobs = nil // no trigger: only the cycles asked for
	client, err := river.NewClient(riverpgxv5.New(dbPool), config)
	if err != nil {
		panic(err)
	}
	completed, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() {
		if err := client.Stop(ctx); err != nil {
			panic(err)
		}
	}()
	for _, start := range starts {
		if _, err := scheduler.EnqueueCycle(ctx, client, task, start); err != nil {
			panic(err)
		}
		for done := false; !done; {
			select {
			case event := <-completed:
				done = event.Job.Kind == "riverslot_bootstrap"
			case <-time.After(time.Minute):
				panic("the bootstrap of " + start.String() + " did not complete within a minute")
			}
		}
	}
}
