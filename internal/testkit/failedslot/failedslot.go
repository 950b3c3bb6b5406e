// Package failedslot builds a failed running cycle beside a prepared one,
// for the tests of every reader that must describe the running cycle
// (Status, Account, StatusShards, riverslot status).
package failedslot

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// Bootstrap bootstraps the task "transactions"' cycle running (started
// already) and the next one, ahead of its start, through EnqueueCycle and
// a River client that works the control queue. Every insert of a sync job
// fails (a trigger raising "sync inserts are broken": a real database
// error in the middle of a fan-out), and once slot 0's fan-out has failed,
// its per-slot job is cancelled: the slot is failed for good, the running
// cycle's verdict "failed slot 0". The accounts table has 20 accounts, all
// in slot 0 (bucket 0).
func Bootstrap(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, scheduler *riverslot.Scheduler, running, next time.Time) {
	t.Helper()
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)")
	require.NoError(t, err)
	for range 20 {
		id := uuid.New()
		id[15] = 0
		_, err := pool.Exec(ctx, "INSERT INTO "+accounts+" (id) VALUES ($1)", id)
		require.NoError(t, err)
	}
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	fn := pgx.Identifier{schema, "fail_sync_inserts"}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'sync inserts are broken'; END $$;
		CREATE TRIGGER fail_sync_inserts BEFORE INSERT ON `+jobs+` FOR EACH ROW WHEN (NEW.kind = 'riverslot_sync') EXECUTE FUNCTION `+fn+`();`)
	require.NoError(t, err)

	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, scheduler.Configure(config))
	config.PeriodicJobs = nil // the test makes its cycles itself
	client, _ := riverslottest.StartClient(ctx, t, pool, config)
	info, err := scheduler.Task("transactions")
	require.NoError(t, err)
	for _, start := range []time.Time{running, next} {
		_, err := scheduler.EnqueueCycle(ctx, client, "transactions", start)
		require.NoError(t, err)
	}
	riverslottest.WaitFor(t, 30*time.Second, "both cycles' per-slot jobs", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", perslot.Kind) == 2*int64(info.Plan.Slots)
	})
	var slot0 int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2 AND (args->>'slot')::int = 0",
		perslot.Kind, running).Scan(&slot0))
	riverslottest.WaitFor(t, 30*time.Second, "slot 0's fan-out to fail", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND cardinality(errors) > 0", slot0) == 1
	})
	_, err = client.JobCancel(ctx, slot0)
	require.NoError(t, err)
	riverslottest.WaitFor(t, 30*time.Second, "slot 0's per-slot job to be cancelled", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND state = 'cancelled'", slot0) == 1
	})
}
