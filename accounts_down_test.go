package riverslot_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatusAccountsDatabaseDown: with the accounts in a database that does
// not answer (River's does), a cycle's fan-outs wait for it, and Status
// still answers: its verdict says the slots wait for the accounts database,
// and it says the accounts expected per slot could not be counted.
func TestStatusAccountsDatabaseDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	down, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(down.Close)

	noop := func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
		{Name: "transactions", Cycle: 32 * time.Second, Schema: "app", Table: "accounts", AccountsPool: down, Sync: noop},
	}})
	require.NoError(t, err)
	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, scheduler.Configure(config))
	config.PeriodicJobs = nil
	client, _ := riverslottest.StartClient(ctx, t, pool, config)
	info, err := scheduler.Task("transactions")
	require.NoError(t, err)
	// The cycle running now if it just began, else the next: its slots
	// fan out on time and wait for the database, none past its late
	// window yet (a slot that gives up is "failed", another verdict).
	start := info.Schedule.Start(time.Now())
	if time.Since(start) > 4*time.Second {
		start = info.Schedule.Next(start)
	}
	_, err = scheduler.EnqueueCycle(ctx, client, "transactions", start)
	require.NoError(t, err)

	var st *riverslot.TaskStatus
	riverslottest.WaitFor(t, time.Until(start)+60*time.Second, "Status to say the slots wait for the accounts database", func() bool {
		st, err = scheduler.Status(ctx, "transactions")
		if errors.Is(err, riverslot.ErrNoCycle) {
			return false // not bootstrapped yet
		}
		require.NoError(t, err, "Status answers while the accounts database is down")
		return strings.Contains(st.Current.Verdict, "waiting for the accounts database")
	})
	require.Regexp(t, `^behind by \d+ slots: waiting for the accounts database`, st.Current.Verdict)
	require.Contains(t, st.Current.AccountsError, "the accounts database did not answer")
	require.False(t, st.Current.OnTrack)
}
