package riverslot_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

func TestRowBudget(t *testing.T) {
	t.Parallel()
	day, err := slotplan.New(24 * time.Hour) // 128 slots of 11m15s
	require.NoError(t, err)
	info := riverslot.TaskInfo{Plan: day, Lead: 10 * time.Second}
	// Worked out by hand. 24 h retention: the window is 10 + 675 + 86,400 =
	// 87,085 s, 87,085 / 86,400 = 1.0079282 cycles; 100M x 1.0079282 =
	// 100,792,824 sync jobs (truncated), 129 x 1.0079282 = 130.02 -> 130
	// per-slot jobs (128 slots + 1): 100,792,954.
	require.EqualValues(t, 100_792_954, riverslot.RowBudget(100_000_000, info, 24*time.Hour))
	// 1 min retention: 10 + 675 + 60 = 745 s, 745 / 86,400 = 0.0086227
	// cycles; 100M x 0.0086227 = 862,268 sync jobs, and at least one cycle
	// of per-slot jobs: 129. 862,268 + 129 = 862,397.
	require.EqualValues(t, 862_397, riverslot.RowBudget(100_000_000, info, time.Minute), "at least one cycle of per-slot jobs")
	require.EqualValues(t, -1, riverslot.RowBudget(1, info, -1), "kept forever: unbounded")
}

// TestCheckShortSlots: a 16 s cycle has 16 slots of 1 s, shorter than
// River's 5 s scheduler tick; Check warns with the default LateGrace (one
// slot, 1 s), not with LateGrace 5 s, nor on a 24 h cycle, nor for a
// Punctual task (its jobs are inserted available: no tick to wait for).
func TestCheckShortSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)
	const warning = "riverslot: slots are shorter than River's 5 s scheduler tick and LateGrace is too, so most accounts would be enqueued late; set LateGrace to at least 5s or use a longer Cycle"
	check := func(t *testing.T, cycle, lateGrace time.Duration, punctual ...bool) []map[string]slog.Value {
		t.Helper()
		logger, records := riverslottest.RecordingLogger(slog.LevelWarn)
		s, err := riverslot.New(pool, &riverslot.Config{Logger: logger, Tasks: []riverslot.Task{{
			Name: "transactions", Cycle: cycle, LateGrace: lateGrace, Schema: schema, Table: "accounts", Sync: noopSync,
			Punctual: len(punctual) > 0 && punctual[0],
		}}})
		require.NoError(t, err)
		require.NoError(t, s.Check(ctx))
		return records.Find(warning)
	}
	warned := check(t, 16*time.Second, 0)
	require.Len(t, warned, 1)
	require.Equal(t, time.Second, warned[0]["slot"].Duration())
	require.Equal(t, time.Second, warned[0]["late_grace"].Duration())
	require.Empty(t, check(t, 16*time.Second, 5*time.Second))
	require.Empty(t, check(t, 24*time.Hour, 0))
	require.Empty(t, check(t, 16*time.Second, 0, true))
}

// TestCheckLedgerAndRowBudget: Check warns when the table's estimate and
// River's retention keep more than RowBudgetWarn rows (1,000 accounts on a
// 16 s cycle with River's 24 h default: 5.4M), not with a 1 minute
// retention; after Configure it fails without the ledger table, which
// Migrate (run twice: idempotent) creates.
func TestCheckLedgerAndRowBudget(t *testing.T) {
	t.Parallel()
	ctx, pool, schema := analyzedAccounts(t, 1000)
	const warning = "riverslot: this configuration keeps more rows in river_job than RowBudgetWarn; shorten River's CompletedJobRetentionPeriod (riverslot does not need it: its ledger keeps cycles unique) or see docs/scale.md"

	check := func(t *testing.T, retention time.Duration) ([]map[string]slog.Value, error) {
		t.Helper()
		logger, records := riverslottest.RecordingLogger(slog.LevelWarn)
		s, err := riverslot.New(pool, &riverslot.Config{Logger: logger, Tasks: []riverslot.Task{{
			Name: "transactions", Cycle: 16 * time.Second, Schema: schema, Table: "accounts", Sync: noopSync,
		}}})
		require.NoError(t, err)
		require.NoError(t, s.Configure(&river.Config{Schema: schema, CompletedJobRetentionPeriod: retention}))
		err = s.Check(ctx)
		return records.Find(warning), err
	}

	warned, err := check(t, 0)
	require.NoError(t, err)
	require.Len(t, warned, 1, "River's 24 h default on a 16 s cycle")
	require.EqualValues(t, 1000, warned[0]["accounts_estimate"].Int64())
	require.InDelta(t, (1000+17)*86401.5/16, warned[0]["river_job_rows"].Int64(), 2, "(accounts + slots + 1) x (lead 0.5 s + slot 1 s + 24 h) / 16 s")
	warned, err = check(t, time.Minute)
	require.NoError(t, err)
	require.Empty(t, warned)

	_, err = pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{schema, "riverslot_ledger"}.Sanitize())
	require.NoError(t, err)
	_, err = check(t, time.Minute)
	require.ErrorContains(t, err, "riverslot's ledger table riverslot_ledger does not exist in River's schema; run riverslot.Migrate")
	require.NoError(t, riverslot.Migrate(ctx, pool, schema))
	require.NoError(t, riverslot.Migrate(ctx, pool, schema))
	_, err = check(t, time.Minute)
	require.NoError(t, err)
}

// TestMigrateLedgerUpgrade: an app upgrading from a version without the
// ledger's decisions runs Migrate on River's schema, which still holds
// the current cycle's jobs (River's default retention). Migrate adds the
// columns, and records the cycle River holds: the bootstrapped cycle with
// the placement its per-slot jobs carry, each per-slot job as its slot
// (finished with its output's figures when completed), but not a
// bootstrap that made no per-slot job (FirstCycleNext). Check reports the
// ledger whose columns are missing before, and passes after; once River
// deletes the cycle's finished jobs, Status still describes it.
func TestMigrateLedgerUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	led := pgx.Identifier{schema, "riverslot_ledger"}.Sanitize()

	// The ledger of the previous version: the table without its new
	// columns (as Migrate made it then).
	_, err := pool.Exec(ctx, "DROP TABLE "+led)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "CREATE TABLE "+led+` (task text NOT NULL, cycle_start timestamptz NOT NULL, plan text NOT NULL, slot int NOT NULL,
		job_id bigint, created_at timestamptz NOT NULL DEFAULT now(), accounts bigint, range_accounts bigint, inserted bigint, skipped bigint,
		late_spread bigint, late_skipped bigint, batches int, finished_at timestamptz, PRIMARY KEY (task, cycle_start, plan, slot))`)
	require.NoError(t, err)
	s, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: 16 * time.Second, Schema: schema, Table: "accounts", Sync: noopSync,
	}}})
	require.NoError(t, err)
	require.NoError(t, s.Configure(&river.Config{Schema: schema, CompletedJobRetentionPeriod: time.Minute}))
	require.ErrorContains(t, s.Check(ctx), "was made by an older riverslot and lacks columns this version records; run riverslot.Migrate")

	info, err := s.Task("transactions")
	require.NoError(t, err)
	start := info.Schedule.Start(time.Now()).UTC()
	skipped := start.Add(-info.Plan.Cycle) // a bootstrap that made no cycle
	key := func(t time.Time) string { return t.Format(time.RFC3339Nano) }
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO ` + jobs + ` (args, kind, max_attempts, priority, queue, state, finalized_at)
			SELECT jsonb_build_object('task', 'transactions', 'cycle_start', c, 'plan', $1::text), 'riverslot_bootstrap', 25, 1, 'default', 'completed', now()
			FROM unnest(ARRAY[$2::text, $3::text]) c`, []any{info.PlanID, key(start), key(skipped)}},
		// Slots 0-9 done, 10-15 still scheduled, placement recorded.
		{`INSERT INTO ` + jobs + ` (args, kind, max_attempts, priority, queue, state, scheduled_at, finalized_at, metadata)
			SELECT jsonb_build_object('task', 'transactions', 'cycle_start', $2::text, 'slot', s, 'plan', $1::text, 'placement', 'pinned',
					'pins', jsonb_build_object('task', 'transactions', 'plan', $1::text, 'schema', $4::text), 'cycle_end', $3::text),
				'riverslot_perslot', 25, 1, 'default', (CASE WHEN s < 10 THEN 'completed' ELSE 'scheduled' END)::` + pgx.Identifier{schema, "river_job_state"}.Sanitize() + `,
				now(), CASE WHEN s < 10 THEN now() END,
				CASE WHEN s < 10 THEN '{"output": {"accounts": 7, "inserted": 6, "skipped": 1, "batches": 1}}'::jsonb ELSE '{}'::jsonb END
			FROM generate_series(0, 15) s`, []any{info.PlanID, key(start), key(start.Add(info.Plan.Cycle)), schema}},
	} {
		_, err := pool.Exec(ctx, stmt.sql, stmt.args...)
		require.NoError(t, err)
	}

	require.NoError(t, riverslot.Migrate(ctx, pool, schema))
	require.NoError(t, s.Check(ctx))
	for _, ddl := range taskspec.PinsDDL(schema) { // the pins the cycle follows, empty
		_, err := pool.Exec(ctx, ddl)
		require.NoError(t, err)
	}
	var (
		placement, pinsTask string
		cycleEnd            time.Time
	)
	require.NoError(t, pool.QueryRow(ctx, "SELECT placement, pins->>'task', cycle_end FROM "+led+" WHERE cycle_start = $1 AND slot = -1", start).
		Scan(&placement, &pinsTask, &cycleEnd))
	require.Equal(t, "pinned", placement, "the placement its per-slot jobs carry")
	require.Equal(t, "transactions", pinsTask)
	require.True(t, cycleEnd.Equal(start.Add(info.Plan.Cycle)), "cycle_end %s", cycleEnd)
	require.EqualValues(t, 10, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+led+" WHERE cycle_start = $1 AND slot >= 0 AND finished_at IS NOT NULL AND inserted = 6 AND skipped = 1 AND accounts = 7", start))
	require.EqualValues(t, 6, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+led+" WHERE cycle_start = $1 AND slot >= 0 AND finished_at IS NULL AND job_id IS NOT NULL", start))
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+led+" WHERE cycle_start = $1", skipped), "a bootstrap without per-slot jobs made no cycle")

	// River deletes the cycle's finished jobs; Status still knows the cycle
	// from the ledger, and a second Migrate changes nothing.
	_, err = pool.Exec(ctx, "DELETE FROM "+jobs+" WHERE state = 'completed'")
	require.NoError(t, err)
	require.NoError(t, riverslot.Migrate(ctx, pool, schema))
	require.EqualValues(t, 17, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+led))
	st, err := s.Status(ctx, "transactions")
	require.NoError(t, err)
	require.True(t, st.Current.CycleStart.Equal(start), "the recorded cycle, %s", st.Current.CycleStart)
	require.Equal(t, 10, st.Current.SlotsDone)
	require.EqualValues(t, 60, st.Current.Enqueued)
}

// TestCheckStartRate: Check warns when the sync queue's MaxWorkers cannot
// start the cycle's syncs as fast as the cycle asks (1,000 accounts on a
// 16 s cycle: 62.5 a second; a queue starts at most MaxWorkers x 10 a
// second, and the warning comes above 70% of that), and names the
// MaxWorkers that would do.
func TestCheckStartRate(t *testing.T) {
	t.Parallel()
	ctx, pool, schema := analyzedAccounts(t, 1000)
	const warning = "riverslot: the task's sync queue cannot start its syncs as fast as the cycle asks on one node: a River queue starts at most MaxWorkers x 10 jobs a second (it fetches at most MaxWorkers per 100 ms fetch cooldown), fewer with longer syncs; raise MaxWorkers, lengthen Cycle, or run more nodes (see docs/simulate.md)"

	for _, tt := range []struct {
		workers int
		warn    bool
	}{{5, true}, {8, true}, {9, false}, {50, false}} {
		logger, records := riverslottest.RecordingLogger(slog.LevelWarn)
		s, err := riverslot.New(pool, &riverslot.Config{Logger: logger, Tasks: []riverslot.Task{{
			Name: "transactions", Cycle: 16 * time.Second, Schema: schema, Table: "accounts", Sync: noopSync,
		}}})
		require.NoError(t, err)
		require.NoError(t, s.Configure(&river.Config{Schema: schema, CompletedJobRetentionPeriod: time.Minute,
			Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: tt.workers}}}))
		require.NoError(t, s.Check(ctx))
		warned := records.Find(warning)
		if !tt.warn {
			require.Empty(t, warned, "MaxWorkers %d starts up to %d a second", tt.workers, tt.workers*10)
			continue
		}
		require.Len(t, warned, 1, "MaxWorkers %d", tt.workers)
		require.EqualValues(t, 63, warned[0]["syncs_per_second_needed"].Float64(), "1,000 accounts / 16 s, rounded")
		require.EqualValues(t, tt.workers*10, warned[0]["starts_per_second_at_most"].Int64())
		require.EqualValues(t, 9, warned[0]["max_workers_suggested"].Int64(), "62.5 / (0.7 x 10), rounded up")
	}
}

// analyzedAccounts makes a schema with River's tables and n accounts,
// analyzed so that the planner's estimate (what Check reads) is n.
func analyzedAccounts(t *testing.T, n int) (context.Context, *pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", n)
	_, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, "accounts"}.Sanitize())
	require.NoError(t, err)
	return ctx, pool, schema
}
