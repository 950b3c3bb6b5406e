package riverslot_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/sqlbucket"
)

// BenchmarkStatus measures Scheduler.Status on a 24 h task (128 slots) over
// 1,000,000 accounts, halfway through a cycle: 64 slots fanned out (500,000
// completed sync jobs of the cycle, 500,000 of the cycle before, 6,000 of
// them completed without calling Sync), one slot's worth (7,800) still
// scheduled. Both cycles are pinned as a giant's would be: their per-slot
// jobs name the pins, which move slot 5's accounts (about 7,800) to other
// slots. The accounts per slot, and those the pins move, are counted once a
// minute, so the loop measures the calls in between; the first call's time
// is logged. Run it with
//
//	go test -run '^$' -bench Status -benchtime 20x .
func BenchmarkStatus(b *testing.B) {
	ctx := context.Background()
	s, _ := seedStatusBench(b)

	begun := time.Now()
	st, err := s.Status(ctx, "transactions")
	require.NoError(b, err)
	b.Logf("first Status (counts the accounts per slot): %s", time.Since(begun).Round(time.Millisecond))
	require.Equal(b, 64, st.Current.SlotsDone)
	require.EqualValues(b, 7800, st.Current.Pending)
	require.EqualValues(b, 5000, st.Current.SkippedStale)
	require.EqualValues(b, 495000, st.Current.Synced)
	require.True(b, st.Current.LatenessKnown)
	require.Equal(b, riverslot.PlacementPinned, st.Current.Placement)
	require.Positive(b, st.Current.PerSlot[5].PinnedOut)
	require.Zero(b, st.Current.PerSlot[5].Expected, "slot 5's accounts are all pinned away")

	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Status(ctx, "transactions"); err != nil {
			b.Fatal(err)
		}
	}
}

// seedStatusBench builds BenchmarkStatus's schema (1,000,000 accounts, or
// RIVERSLOT_BENCH_ACCOUNTS; two pinned 24 h cycles of task transactions,
// 1,007,800 sync jobs whatever the accounts: what River keeps of a larger
// fleet with a shorter retention) and returns a configured scheduler over
// it and the schema. BenchmarkHandler shares it.
func seedStatusBench(b *testing.B) (*riverslot.Scheduler, string) {
	b.Helper()
	ctx := context.Background()
	pool := riverslottest.Pool(b)
	schema := riverslottest.Schema(ctx, b, pool)
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	pins := pgx.Identifier{schema, "riverslot_pins"}.Sanitize()

	s, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: 24 * time.Hour, Schema: schema, Table: "accounts", Filter: "active", Sync: noopSync,
	}}})
	require.NoError(b, err)
	require.NoError(b, s.Configure(&river.Config{Schema: schema}))
	info, err := s.Task("transactions")
	require.NoError(b, err)
	start := info.Schedule.Start(time.Now())
	prev := start.Add(-24 * time.Hour)
	ref, err := json.Marshal(taskspec.PinsRef{Task: "transactions", Plan: info.PlanID, Schema: schema})
	require.NoError(b, err)
	pinsRef := string(ref)
	for _, ddl := range taskspec.PinsDDL(schema) {
		_, err := pool.Exec(ctx, ddl)
		require.NoError(b, err)
	}

	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{"CREATE TABLE " + table + " (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)", nil},
		{"INSERT INTO " + table + " SELECT gen_random_uuid(), g % 50 <> 0 FROM generate_series(1, $1::bigint) g", []any{benchAccounts(b)}},
		{sqlbucket.IndexDDL(schema, "accounts", "id"), nil},
		// Both cycles' bootstrap jobs, done.
		{`INSERT INTO ` + jobs + ` (args, kind, max_attempts, priority, queue, state, scheduled_at, attempted_at, finalized_at, created_at)
			SELECT jsonb_build_object('task', 'transactions', 'cycle_start', c, 'plan', $1::text), 'riverslot_bootstrap', 25, 1, 'default',
				'completed', now(), now(), now(), now() - interval '1 day'
			FROM unnest(ARRAY[$2::text, $3::text]) c`,
			[]any{info.PlanID, prev.UTC().Format(time.RFC3339Nano), start.UTC().Format(time.RFC3339Nano)}},
		// Per-slot jobs: the previous cycle done, this one half done; both
		// follow the task's pins.
		{`INSERT INTO ` + jobs + ` (args, kind, max_attempts, priority, queue, state, scheduled_at, attempted_at, finalized_at, metadata, created_at)
			SELECT jsonb_build_object('task', 'transactions', 'cycle_start', c, 'slot', s, 'plan', $1::text, 'placement', 'pinned', 'pins', $4::jsonb), 'riverslot_perslot', 25, 1, 'default',
				'completed', now(), now(), now(), '{"output": {"accounts": 7812, "inserted": 7812, "skipped": 0, "batches": 4}}', now() - interval '1 day'
			FROM unnest(ARRAY[$2::text, $3::text]) c, generate_series(0, 127) s WHERE c = $2 OR s < 64`,
			[]any{info.PlanID, prev.UTC().Format(time.RFC3339Nano), start.UTC().Format(time.RFC3339Nano), pinsRef}},
		{`INSERT INTO ` + jobs + ` (args, kind, max_attempts, priority, queue, state, scheduled_at, created_at)
			SELECT jsonb_build_object('task', 'transactions', 'cycle_start', $2::text, 'slot', s, 'plan', $1::text, 'placement', 'pinned', 'pins', $3::jsonb), 'riverslot_perslot', 25, 1, 'default',
				'scheduled', now() + interval '1 hour', now() - interval '1 hour'
			FROM generate_series(64, 127) s`,
			[]any{info.PlanID, start.UTC().Format(time.RFC3339Nano), pinsRef}},
		// The pins of both cycles: slot 5's accounts (buckets 10-11) pinned
		// round the other slots.
		{`INSERT INTO ` + pins + ` (task, plan, cycle_start, account_id, bucket, slot, weight)
			SELECT 'transactions', $1::text, c::timestamptz, id, get_byte(uuid_send(id), 15), 6 + (row_number() OVER (PARTITION BY c ORDER BY id))::int % 122, 1
			FROM ` + table + `, unnest(ARRAY[$2::text, $3::text]) c WHERE get_byte(uuid_send(id), 15) BETWEEN 10 AND 11 AND active`,
			[]any{info.PlanID, prev.UTC().Format(time.RFC3339Nano), start.UTC().Format(time.RFC3339Nano)}},
		// Sync jobs: 500,000 completed in each cycle, finalized over the
		// last 24 h, as with River's default retention; 7,800 scheduled.
		{`INSERT INTO ` + jobs + ` (args, kind, max_attempts, priority, queue, state, scheduled_at, attempted_at, finalized_at, attempt, created_at)
			SELECT jsonb_build_object('task', 'transactions', 'account_id', gen_random_uuid(), 'cycle_start', c, 'slot', g % 64), 'riverslot_sync', 5, 2, 'default',
				'completed', now() - interval '1 minute', now() - interval '1 minute' + interval '200 milliseconds', now() - (g % 86400) * interval '1 second', 1, now() - interval '2 hours'
			FROM unnest(ARRAY[$1::text, $2::text]) c, generate_series(1, 500000) g`,
			[]any{prev.UTC().Format(time.RFC3339Nano), start.UTC().Format(time.RFC3339Nano)}},
		{`INSERT INTO ` + jobs + ` (args, kind, max_attempts, priority, queue, state, scheduled_at, created_at)
			SELECT jsonb_build_object('task', 'transactions', 'account_id', gen_random_uuid(), 'cycle_start', $1::text, 'slot', 64), 'riverslot_sync', 5, 2, 'default',
				'scheduled', now() + interval '5 minutes', now()
			FROM generate_series(1, 7800) g`,
			[]any{start.UTC().Format(time.RFC3339Nano)}},
		// 5,000 stale syncs among the cycle's completed.
		{`UPDATE ` + jobs + ` SET metadata = jsonb_build_object('output', jsonb_build_object('riverslot_skipped', 'stale'))
			WHERE id IN (SELECT id FROM ` + jobs + ` WHERE kind = 'riverslot_sync' AND state = 'completed' AND args->>'cycle_start' = $1 ORDER BY id LIMIT 5000)`,
			[]any{start.UTC().Format(time.RFC3339Nano)}},
		// What River keeps of other tasks in production: completed sync
		// jobs of three other tasks, finalized over the last 24 h (River's
		// default retention), RIVERSLOT_BENCH_RETAINED of them (0 unless
		// set).
		{`INSERT INTO ` + jobs + ` (args, kind, max_attempts, priority, queue, state, scheduled_at, attempted_at, finalized_at, attempt, created_at)
			SELECT jsonb_build_object('task', 'other_' || (g % 3), 'account_id', gen_random_uuid(), 'cycle_start', $1::text, 'slot', g % 128, 'not_after', now()), 'riverslot_sync', 5, 2, 'default',
				'completed', f - interval '300 milliseconds', f - interval '100 milliseconds', f, 1, f - interval '1 hour'
			FROM generate_series(1, $2::bigint) g, LATERAL (SELECT now() - (g % 86400) * interval '1 second' AS f) t`,
			[]any{start.UTC().Format(time.RFC3339Nano), benchRetained(b)}},
		{"ANALYZE " + table, nil},
		{"ANALYZE " + pins, nil},
		{"ANALYZE " + jobs, nil},
	} {
		_, err := pool.Exec(ctx, stmt.sql, stmt.args...)
		require.NoError(b, err, stmt.sql)
	}
	// The ledger, as the bootstraps and fan-outs record it: here from the
	// jobs above, as MigrateLedger records an upgrade's cycles.
	require.NoError(b, riverslot.MigrateLedger(ctx, pool, schema))
	// How the cycle's completed syncs ended, as their workers count it.
	riverslottest.CountOutcomes(ctx, b, pool, schema, "transactions", info.PlanID, start, ledger.OutcomeStale, 5000, 0)
	riverslottest.CountOutcomes(ctx, b, pool, schema, "transactions", info.PlanID, start, ledger.OutcomeSynced, 495000, 200*time.Millisecond)

	return s, schema
}

// benchRetained is RIVERSLOT_BENCH_RETAINED, else 0: the completed sync jobs
// of other tasks seedStatusBench adds to river_job, finalized over 24 h.
func benchRetained(b *testing.B) int64 {
	b.Helper()
	v := os.Getenv("RIVERSLOT_BENCH_RETAINED")
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		b.Fatalf("RIVERSLOT_BENCH_RETAINED must be a whole number of jobs, got %q", v)
	}
	b.Logf("seeding %d completed sync jobs of other tasks over 24 h (RIVERSLOT_BENCH_RETAINED)", n)
	return n
}

// benchAccounts is RIVERSLOT_BENCH_ACCOUNTS, else 1,000,000: the size of
// the accounts table BenchmarkStatus and BenchmarkHandler seed.
func benchAccounts(b *testing.B) int64 {
	b.Helper()
	v := os.Getenv("RIVERSLOT_BENCH_ACCOUNTS")
	if v == "" {
		return 1_000_000
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1000 {
		b.Fatalf("RIVERSLOT_BENCH_ACCOUNTS must be a whole number of accounts, at least 1000, got %q", v)
	}
	b.Logf("seeding %d accounts (RIVERSLOT_BENCH_ACCOUNTS)", n)
	return n
}
