package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/measure"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/sqlbucket"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" && binPath != os.Getenv("RIVERSLOT_BIN") {
		// The riverslot binary built for the process tests; not one make
		// test built for every package (it removed .bin, and sim's
		// TestFidelity, run after, found no binary).
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
			// An idle pooled connection's background reader, left blocked after a
			// large write (COPY) until the connection is next used or closed.
			goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

type testBundle struct {
	ids    []uuid.UUID
	pool   *pgxpool.Pool
	schema string
}

// setup creates a schema with River's tables, an accounts table with n
// accounts, its bucket index, and a "synced" table that sync functions built
// by recordSync write to.
func setup(t *testing.T, accounts int) (context.Context, *testBundle) {
	t.Helper()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", accounts)
	require.NoError(t, sqlbucket.CreateIndex(ctx, pool, schema, "accounts", "id"))
	riverslottest.CreateSyncedTable(ctx, t, pool, schema)
	dumpStates.Store(t, func() string {
		rows, err := pool.Query(context.Background(), "SELECT kind, state, count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+" GROUP BY 1, 2 ORDER BY 1, 2")
		if err != nil {
			return err.Error()
		}
		defer rows.Close()
		var out string
		for rows.Next() {
			var kind, state string
			var n int64
			_ = rows.Scan(&kind, &state, &n)
			out += fmt.Sprintf("  %s %s %d\n", kind, state, n)
		}
		return out
	})
	t.Cleanup(func() { dumpStates.Delete(t) })
	return ctx, &testBundle{ids: ids, pool: pool, schema: schema}
}

// recordSync returns a SyncFunc that records each call in the synced table.
func (b *testBundle) recordSync() riverslot.SyncFunc {
	return riverslottest.RecordSync(b.pool, b.schema)
}

// startClient builds a River client through scheduler.Configure, working
// queues (40 workers each), and starts it. With periodic false the cycle
// triggers are left out: the test enqueues its cycles itself.
func startClient(ctx context.Context, t *testing.T, b *testBundle, scheduler *riverslot.Scheduler, periodic bool, queues ...string) *river.Client[pgx.Tx] {
	t.Helper()

	qc := map[string]river.QueueConfig{}
	for _, q := range queues {
		qc[q] = river.QueueConfig{MaxWorkers: 40}
	}
	config := &river.Config{
		Schema:            b.schema,
		Queues:            qc,
		Logger:            riverslottest.LockLogger(t, b.pool),
		FetchPollInterval: 200 * time.Millisecond,
		TestOnly:          true,
	}
	require.NoError(t, scheduler.Configure(config))
	if !periodic {
		config.PeriodicJobs = nil
	}
	client, err := river.NewClient(riverpgxv5.New(b.pool), config)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, client.Stop(stopCtx))
		})
	})
	return client
}

// newScheduler builds a scheduler logging through t.
func newScheduler(t *testing.T, b *testBundle, tasks ...riverslot.Task) *riverslot.Scheduler {
	t.Helper()
	s, err := riverslot.New(b.pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: tasks})
	require.NoError(t, err)
	return s
}

// taskInfo returns the validated task.
func taskInfo(t *testing.T, s *riverslot.Scheduler, name string) riverslot.TaskInfo {
	t.Helper()
	info, err := s.Task(name)
	require.NoError(t, err)
	return info
}

// offsetForStartIn returns the TriggerOffset that puts a cycle start d from
// now (rounded to whole seconds), and that start.
func offsetForStartIn(cycle, d time.Duration) (time.Duration, time.Time) {
	start := time.Now().Add(d).Truncate(time.Second).UTC()
	off := time.Duration(start.UnixNano()) % cycle
	return off, start
}

// waitFor polls cond until it is true or the deadline passes. It waits for a
// condition the test then asserts on; it is not a sleep standing in for one.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()

	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s%s", timeout, what, jobStates(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dumpStates, when set by setup, describes the job table for a timeout message.
var dumpStates sync.Map // *testing.T -> func() string

func jobStates(t *testing.T) string {
	if f, ok := dumpStates.Load(t); ok {
		return "\njobs by kind and state:\n" + f.(func() string)()
	}
	return ""
}

func (b *testBundle) count(ctx context.Context, t *testing.T, sql string, args ...any) int64 {
	t.Helper()

	var n int64
	require.NoError(t, b.pool.QueryRow(ctx, sql, args...).Scan(&n))
	return n
}

func (b *testBundle) measure(ctx context.Context, t *testing.T, task string, cycleStart time.Time) *measure.Cycle {
	t.Helper()

	c, err := measure.MeasureCycle(ctx, b.pool, measure.Target{
		RiverSchema:   b.schema,
		AccountsTable: pgx.Identifier{b.schema, "accounts"}.Sanitize(),
		IDColumn:      "id",
		Filter:        "active",
		SyncKind:      syncjob.Kind,
		Task:          task,
		SyncedTable:   pgx.Identifier{b.schema, "synced"}.Sanitize(),
	}, cycleStart)
	require.NoError(t, err)
	return c
}

// enqueueFutureCycle enqueues the cycle that starts an hour from now and
// waits for its per-slot jobs, which stay scheduled until runSlots makes
// some of them run now.
func (b *testBundle) enqueueFutureCycle(ctx context.Context, t *testing.T, scheduler *riverslot.Scheduler, client *river.Client[pgx.Tx]) time.Time {
	t.Helper()
	info := taskInfo(t, scheduler, "transactions")
	start := info.Schedule.Next(time.Now().Add(time.Hour))
	_, err := scheduler.EnqueueCycle(ctx, client, "transactions", start)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the cycle's per-slot jobs", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "river_job"}.Sanitize()+" WHERE kind = $1", perslot.Kind) == int64(info.Plan.Slots)
	})
	return start
}

// runSlots makes the per-slot jobs of slots due now, with maxAttempts
// attempts, and returns their ids in slot order.
func (b *testBundle) runSlots(ctx context.Context, t *testing.T, maxAttempts int, slots ...int) []int64 {
	t.Helper()
	rows, err := b.pool.Query(ctx, "WITH u AS (UPDATE "+pgx.Identifier{b.schema, "river_job"}.Sanitize()+
		" SET scheduled_at = now(), state = 'available', max_attempts = $3 WHERE kind = $1 AND (args->>'slot')::int = ANY($2)"+
		" RETURNING id, (args->>'slot')::int AS slot) SELECT id FROM u ORDER BY slot",
		perslot.Kind, slots, maxAttempts)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, len(slots))
	return ids
}

// failSyncInserts makes every insert of a sync job raise message while the
// SQL condition holds (a real database error in the middle of a fan-out).
func (b *testBundle) failSyncInserts(ctx context.Context, t *testing.T, condition, message string) {
	t.Helper()
	fn := pgx.Identifier{b.schema, "fail_sync_inserts"}.Sanitize()
	_, err := b.pool.Exec(ctx, `
		CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF `+condition+` THEN RAISE EXCEPTION '`+message+`'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_sync_inserts BEFORE INSERT ON `+pgx.Identifier{b.schema, "river_job"}.Sanitize()+` FOR EACH ROW
			WHEN (NEW.kind = 'riverslot_sync') EXECUTE FUNCTION `+fn+`();`)
	require.NoError(t, err)
}

// requireSyncedOnce asserts what the Sync calls of one cycle did (m from
// b.measure, which counts the synced table's record of calls): every
// account's Sync was called once, but for
//   - accounts whose sync job a busy machine started past its NotAfter:
//     it completed as stale without a call (the next cycle covers the
//     account; syncjob's tests hold the rule). How many is the machine's
//     (a loaded CI run: 2,368 of 4,380); what must hold is the slack: each
//     such job's NotAfter was at least a second (a slot, LateGrace) after
//     its scheduled time, so none was stale the moment it was due;
//   - fannedOutLate accounts the caller knows a late fan-out skipped.
//
// An account's Sync is called twice only on a retry of its job (River runs
// a job at least once).
func (b *testBundle) requireSyncedOnce(ctx context.Context, t *testing.T, m *measure.Cycle, task string, fannedOutLate int64) {
	t.Helper()

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	synced := pgx.Identifier{b.schema, "synced"}.Sanitize()
	var staleUncalled, skippedOther, slackless, retries int64
	require.NoError(t, b.pool.QueryRow(ctx, `WITH s AS (
		SELECT (args->>'account_id')::uuid AS account_id, attempt, scheduled_at, finalized_at,
			metadata->'output' ? $4 AS skipped,
			metadata->'output'->>$4 = $5 AND finalized_at >= (metadata->'output'->>$6)::timestamptz AS stale,
			(metadata->'output'->>$6)::timestamptz AS not_after
		FROM `+jobs+` WHERE kind = $1 AND args->>'task' = $2 AND (args->>'cycle_start')::timestamptz = $3)
	SELECT
		(SELECT count(DISTINCT account_id) FROM s WHERE stale AND NOT EXISTS (
			SELECT 1 FROM `+synced+` c WHERE c.task = $2 AND c.cycle_start = $3 AND c.account_id = s.account_id)),
		(SELECT count(*) FROM s WHERE skipped AND NOT stale),
		(SELECT count(*) FROM s WHERE stale AND attempt = 1 AND not_after < scheduled_at + interval '1 second'),
		(SELECT coalesce(sum(attempt - 1), 0) FROM s WHERE attempt > 1)`,
		syncjob.Kind, task, m.CycleStart, syncjob.OutputSkipped, syncjob.SkippedStale, syncjob.OutputNotAfter).Scan(&staleUncalled, &skippedOther, &slackless, &retries))
	t.Logf("cycle %s of %s: %d accounts, Sync called once for %d, twice or more for %d (%d retried attempts), for none %d (%d stale past their NotAfter, %d skipped by a late fan-out)",
		m.CycleStart.Format(time.RFC3339), task, m.Accounts, m.SyncedOnce, m.Duplicated, retries, m.Missed, staleUncalled, fannedOutLate)
	require.Zero(t, skippedOther, "sync jobs skipped without starting past their NotAfter")
	require.Zero(t, slackless, "stale sync jobs whose NotAfter left less than a second after their scheduled time")
	require.Equal(t, staleUncalled+fannedOutLate, m.Missed, "accounts whose Sync was not called: exactly those skipped as stale or by a late fan-out")
	require.LessOrEqual(t, m.Duplicated, retries, "a second Sync call for an account only on a retry of its job")
}
