// Package statusbench seeds the schema of the status benchmarks: the
// root's BenchmarkStatus and riverslotweb's BenchmarkHandler read the same
// data.
package statusbench

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/sqlbucket"
)

// The task Seed seeds: a 24 h cycle (128 slots) of Task over Table's
// Filter, in the schema given.
const (
	Task   = "transactions"
	Cycle  = 24 * time.Hour
	Table  = "accounts"
	Filter = "active"
)

// Seed fills schema, which holds River's tables and riverslot's ledger,
// with BenchmarkStatus's data (1,000,000 accounts, or
// RIVERSLOT_BENCH_ACCOUNTS; two pinned cycles of Task, plan planID, the
// second starting at start and half fanned out; 1,007,800 sync jobs
// whatever the accounts: what River keeps of a larger fleet with a shorter
// retention). migrateLedger is riverslot.MigrateLedger (this package
// cannot import the root): it records the jobs' cycles in the ledger, as
// an upgrade does. The root's BenchmarkStatus and riverslotweb's
// BenchmarkHandler share it.
func Seed(b *testing.B, pool *pgxpool.Pool, schema, planID string, start time.Time, migrateLedger func(context.Context, *pgxpool.Pool, string) error) {
	b.Helper()
	ctx := context.Background()
	table := pgx.Identifier{schema, Table}.Sanitize()
	jobs := riverjob.QualifiedTable(schema)
	pins := pgx.Identifier{schema, "riverslot_pins"}.Sanitize()
	prev := start.Add(-Cycle)
	ref, err := json.Marshal(taskspec.PinsRef{Task: "transactions", Plan: planID, Schema: schema})
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
			[]any{planID, prev.UTC().Format(time.RFC3339Nano), start.UTC().Format(time.RFC3339Nano)}},
		// Per-slot jobs: the previous cycle done, this one half done; both
		// follow the task's pins.
		{`INSERT INTO ` + jobs + ` (args, kind, max_attempts, priority, queue, state, scheduled_at, attempted_at, finalized_at, metadata, created_at)
			SELECT jsonb_build_object('task', 'transactions', 'cycle_start', c, 'slot', s, 'plan', $1::text, 'placement', 'pinned', 'pins', $4::jsonb), 'riverslot_perslot', 25, 1, 'default',
				'completed', now(), now(), now(), '{"output": {"accounts": 7812, "inserted": 7812, "skipped": 0, "batches": 4}}', now() - interval '1 day'
			FROM unnest(ARRAY[$2::text, $3::text]) c, generate_series(0, 127) s WHERE c = $2 OR s < 64`,
			[]any{planID, prev.UTC().Format(time.RFC3339Nano), start.UTC().Format(time.RFC3339Nano), pinsRef}},
		{`INSERT INTO ` + jobs + ` (args, kind, max_attempts, priority, queue, state, scheduled_at, created_at)
			SELECT jsonb_build_object('task', 'transactions', 'cycle_start', $2::text, 'slot', s, 'plan', $1::text, 'placement', 'pinned', 'pins', $3::jsonb), 'riverslot_perslot', 25, 1, 'default',
				'scheduled', now() + interval '1 hour', now() - interval '1 hour'
			FROM generate_series(64, 127) s`,
			[]any{planID, start.UTC().Format(time.RFC3339Nano), pinsRef}},
		// The pins of both cycles: slot 5's accounts (buckets 10-11) pinned
		// round the other slots.
		{`INSERT INTO ` + pins + ` (task, plan, cycle_start, account_id, bucket, slot, weight)
			SELECT 'transactions', $1::text, c::timestamptz, id, get_byte(uuid_send(id), 15), 6 + (row_number() OVER (PARTITION BY c ORDER BY id))::int % 122, 1
			FROM ` + table + `, unnest(ARRAY[$2::text, $3::text]) c WHERE get_byte(uuid_send(id), 15) BETWEEN 10 AND 11 AND active`,
			[]any{planID, prev.UTC().Format(time.RFC3339Nano), start.UTC().Format(time.RFC3339Nano)}},
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
	require.NoError(b, migrateLedger(ctx, pool, schema))
	// How the cycle's completed syncs ended, as their workers count it.
	riverslottest.CountOutcomes(ctx, b, pool, schema, "transactions", planID, start, ledger.OutcomeStale, 5000, 0)
	riverslottest.CountOutcomes(ctx, b, pool, schema, "transactions", planID, start, ledger.OutcomeSynced, 495000, 200*time.Millisecond)
}

// benchRetained is RIVERSLOT_BENCH_RETAINED, else 0: the completed sync jobs
// of other tasks Seed adds to river_job, finalized over 24 h.
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
