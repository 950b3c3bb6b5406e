package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/riverslottest"
)

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUsage(t *testing.T) {
	t.Parallel()

	code, _, stderr := runCmd(t)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "usage: riverslot <command>")

	code, _, stderr = runCmd(t, "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `unknown command "frobnicate"`)
}

func TestDemoBadFlags(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"ZeroAccounts", []string{"--accounts", "0"}, "riverslot demo: --accounts must be at least 1, got 0"},
		{"NegativeAccounts", []string{"--accounts", "-5"}, "riverslot demo: --accounts must be at least 1, got -5"},
		{"OneSlotCycle", []string{"--cycle", "3s"}, "riverslot demo: --cycle: invalid cycle: Cycle 3s is an odd number of seconds and yields a single slot"},
		{"SubSecondCycle", []string{"--cycle", "500ms"}, "riverslot demo: --cycle: invalid cycle: Cycle must be at least 2s, got 500ms"},
		{"ZeroCycles", []string{"--cycles", "0"}, "riverslot demo: --cycles must be at least 1, got 0"},
		{"ZeroWorkers", []string{"--workers", "0"}, "riverslot demo: --workers must be at least 1, got 0"},
		{"BadCycleStart", []string{"--cycle-start", "tomorrow"}, `riverslot demo: --cycle-start must be RFC 3339, e.g. 2026-11-22T10:00:00Z, got "tomorrow"`},
		{"InjectedSchema", []string{"--schema", `x"; DROP SCHEMA public; --`}, "riverslot demo: --schema must be a plain identifier"},
		{"UnreachableDatabase", []string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, "riverslot demo: cannot reach the database at nobody@127.0.0.1:1/none"},
		{"MalformedURL", []string{"--database-url", "postgres://%zz"}, "riverslot demo: --database-url is not a valid PostgreSQL URL"},
		{"UnknownFlag", []string{"--frob"}, "flag provided but not defined: -frob"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			code, stdout, stderr := runCmd(t, append([]string{"demo"}, tt.args...)...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tt.want)
			require.NotContains(t, stderr, "goroutine", "no stack trace")
			if tt.name != "UnknownFlag" { // the flag package prints usage after its own line
				require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()

	t.Run("SlotWindowsAndAccount", func(t *testing.T) {
		t.Parallel()

		id := "6ba7b810-9dad-11d1-80b4-00c04fd430c8" // last byte 0xc8 = 200
		code, out, stderr := runCmd(t, "plan", "--cycle", "24h", "--anchor", "00:30", "--tz", "Europe/London",
			"--account", id, "--now", "2026-11-22T02:00:00Z")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, out, "slots          128 = gcd(86400, 256)")
		require.Contains(t, out, "slot duration  11m15s")
		// 128 window rows plus the header.
		require.Contains(t, out, "127   +23:48:45                 +24:00:00  254-255 (0xfe-0xff)")
		require.Contains(t, out, "bucket         200 (0xc8)")
		require.Contains(t, out, "slot           100 of 128") // 200 / 2
		require.Contains(t, out, "current cycle  2026-11-22T00:30:00Z")

		// Next syncs are one cycle apart and inside slot 100's window.
		var syncs []time.Time
		for _, line := range strings.Split(out, "\n") {
			if ts, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(line)); err == nil {
				syncs = append(syncs, ts)
			}
		}
		require.Len(t, syncs, 3)
		for i, s := range syncs {
			cycleStart := time.Date(2026, 11, 22+i, 0, 30, 0, 0, time.UTC) // GMT in November
			windowStart := cycleStart.Add(100 * 675 * time.Second)
			require.False(t, s.Before(windowStart), "sync %s before slot window %s", s, windowStart)
			require.True(t, s.Before(windowStart.Add(675*time.Second)))
		}
		require.Equal(t, 24*time.Hour, syncs[1].Sub(syncs[0]))
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()

		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"--cycle", "3s"}, "riverslot plan: --cycle: invalid cycle"},
			{[]string{"--anchor", "25:00"}, `riverslot plan: --anchor: want HH:MM or HH:MM:SS, got "25:00"`},
			{[]string{"--tz", "Mars/Olympus"}, `riverslot plan: --tz: unknown time zone "Mars/Olympus"`},
			{[]string{"--account", "not-a-uuid"}, `riverslot plan: --account must be a UUID, got "not-a-uuid"`},
			{[]string{"--cycle", "256s", "--tz", "UTC"}, "Cycle must divide 24h when Location is set"},
		} {
			code, _, stderr := runCmd(t, append([]string{"plan"}, tt.args...)...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, tt.want)
		}
	})
}

// TestDemoJSON runs a short real demo against Postgres and checks the JSON
// summary against the database and against the definition of the slots.
func TestDemoJSON(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := newDemoSchemaName(t, pool)

	const accounts = 500
	code, stdout, stderr := runCmd(t, "demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--accounts", fmt.Sprint(accounts), "--cycle", "8s", "--cycles", "2", "--json")
	require.Equal(t, 0, code, "stderr:\n%s", stderr)
	require.Contains(t, stderr, "cycle 2/2")

	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &raw), stdout)
	for _, key := range []string{"schema", "accounts_table", "id_column", "sync_kind", "buckets", "slots",
		"slot_duration_seconds", "cycle_seconds", "cycle_starts", "accounts", "synced", "missed", "duplicates",
		"peak_queue_depth", "lateness_p50_seconds", "lateness_p99_seconds"} {
		require.Contains(t, raw, key)
	}

	var s demoSummary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s))
	require.Equal(t, schema, s.Schema)
	require.EqualValues(t, accounts, s.Accounts)
	require.EqualValues(t, 8, s.Slots) // gcd(8, 256)
	require.InDelta(t, 1.0, s.SlotDurationSeconds, 1e-9)
	require.InDelta(t, 8.0, s.CycleSeconds, 1e-9)
	require.Len(t, s.CycleStarts, 2)
	first, err := time.Parse(time.RFC3339, s.CycleStarts[0])
	require.NoError(t, err)
	second, err := time.Parse(time.RFC3339, s.CycleStarts[1])
	require.NoError(t, err)
	require.Equal(t, 8*time.Second, second.Sub(first))
	require.EqualValues(t, 2*accounts, s.Synced, "synced counts account-cycles")
	require.Zero(t, s.Missed)
	require.Zero(t, s.Duplicates)
	require.Positive(t, s.PeakQueueDepth)
	require.LessOrEqual(t, s.PeakQueueDepth, int64(2*accounts))

	// Buckets counted independently from the seeded ids.
	rows, err := pool.Query(ctx, "SELECT id FROM "+pgx.Identifier{schema, "accounts"}.Sanitize())
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	seen := map[byte]bool{}
	for _, id := range ids {
		seen[id[15]] = true
	}
	require.EqualValues(t, len(seen), s.Buckets)
}

func TestBenchAndWorkerBadFlags(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--fanout-sizes", "100k"}, `riverslot bench: --fanout-sizes: want positive integers separated by commas, got "100k"`},
		{[]string{"bench", "--selection-sizes", "0"}, `riverslot bench: --selection-sizes: want positive integers separated by commas, got "0"`},
		{[]string{"bench", "--only", "everything"}, `riverslot bench: --only: unknown benchmark "everything"`},
		{[]string{"bench", "--batch-size", "0"}, "riverslot bench: --batch-size must be at least 1, got 0"},
		{[]string{"bench", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, "riverslot bench: cannot reach the database"},
		{[]string{"worker", "--workers", "0"}, "riverslot worker: --workers must be at least 1, got 0"},
		{[]string{"worker", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, "riverslot worker: cannot reach the database"},
	} {
		code, _, stderr := runCmd(t, tt.args...)
		require.Equal(t, 2, code, "%v: %s", tt.args, stderr)
		require.Contains(t, stderr, tt.want)
	}
}

func TestWorkerRejectsBadTask(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	code, _, stderr := runCmd(t, "worker", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--cycle", "3s")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "yields a single slot")

	code, _, stderr = runCmd(t, "worker", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--table", "missing")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `Table "`+schema+`"."missing" does not exist`)
}

// TestDemoKeepResumes interrupts a demo in the middle of its cycle and
// reruns it with --keep: the second run resumes the same cycle (same
// accounts, same cycle start) and every account is synced exactly once.
func TestDemoKeepResumes(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := newDemoSchemaName(t, pool)
	args := []string{"demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--accounts", "400", "--cycle", "16s"}

	// First run: cancelled (as by Ctrl-C) 10 s in, mid-cycle.
	runCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(runCtx, args, &stdout, &stderr)
	require.Equal(t, 130, code, "stderr:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "interrupted; rerun with --keep to resume the same cycle")

	var firstStart time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT max((args->>'cycle_start')::timestamptz) FROM "+
		pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE kind = 'riverslot_bootstrap'").Scan(&firstStart))

	code, out, errOut := runCmd(t, append(args, "--keep", "--json")...)
	require.Equal(t, 0, code, "stderr:\n%s", errOut)
	require.Contains(t, errOut, "keeping 400 existing accounts")
	require.Contains(t, errOut, "resuming cycle "+firstStart.UTC().Format(time.RFC3339))

	var s demoSummary
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	require.Equal(t, []string{firstStart.UTC().Format(time.RFC3339)}, s.CycleStarts)
	require.EqualValues(t, 400, s.Accounts)
	require.EqualValues(t, 400, s.Synced)
	require.Zero(t, s.Missed)
	require.Zero(t, s.Duplicates)
}

// newDemoSchemaName returns a schema name that does not exist yet, for the
// demo to create (it refuses a schema it did not create), and drops the
// schema when the test ends.
func newDemoSchemaName(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()

	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "riverslot_demo_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("error dropping schema %s: %v", schema, err)
		}
	})
	return schema
}

// TestDemoRefusesSchemaItDidNotCreate points the demo at an existing schema
// holding someone else's table, with every flag combination that drops,
// reseeds or reuses a schema: each run exits 2 naming --schema before it
// touches anything, and the schema keeps exactly its own table and row.
func TestDemoRefusesSchemaItDidNotCreate(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)

	setup := func(t *testing.T, comment string) string {
		t.Helper()
		schema := riverslottest.EmptySchema(ctx, t, pool)
		_, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "invoices"}.Sanitize()+" (id int PRIMARY KEY, total numeric)")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "invoices"}.Sanitize()+" VALUES (1, 99.5)")
		require.NoError(t, err)
		if comment != "" {
			_, err = pool.Exec(ctx, "COMMENT ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" IS '"+comment+"'")
			require.NoError(t, err)
		}
		return schema
	}

	requireUntouched := func(t *testing.T, schema, comment string) {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1", schema)
		require.NoError(t, err)
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"invoices"}, tables, "no River tables, no accounts")
		var total float64
		require.NoError(t, pool.QueryRow(ctx, "SELECT total FROM "+pgx.Identifier{schema, "invoices"}.Sanitize()+" WHERE id = 1").Scan(&total))
		require.InDelta(t, 99.5, total, 1e-9)
		var got *string
		require.NoError(t, pool.QueryRow(ctx, "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1", schema).Scan(&got))
		if comment == "" {
			require.Nil(t, got)
		} else {
			require.Equal(t, comment, *got)
		}
	}

	future := time.Now().Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	for _, comment := range []string{"", "billing team schema"} {
		for _, flags := range [][]string{
			nil,
			{"--keep"},
			{"--accounts", "7"},
			{"--keep", "--accounts", "7"},
			{"--cycles", "2", "--json"},
			{"--keep", "--cycle", "8s", "--cycle-start", future},
			{"--cycle-start", future, "--accounts", "3", "--task", "other"},
		} {
			name := "NoComment"
			if comment != "" {
				name = "OtherComment"
			}
			if len(flags) > 0 {
				name += strings.ReplaceAll(strings.Join(flags, ""), ":", "")
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()

				schema := setup(t, comment)
				args := append([]string{"demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema}, flags...)
				code, stdout, stderr := runCmd(t, args...)
				require.Equal(t, 2, code, "stderr: %s", stderr)
				require.Empty(t, stdout)
				require.Contains(t, stderr, "riverslot demo: --schema "+schema+`: schema "`+schema+`" already exists and was not created by riverslot demo`)
				require.Contains(t, stderr, "nothing was changed. Pass --schema with a name that does not exist yet")
				requireUntouched(t, schema, comment)
			})
		}
	}
}

// TestDemoSchemaOwnership runs the demo's setup step on a schema it creates:
// the schema is marked as the demo's, a rerun without --keep drops and
// recreates it (a stray table goes), a rerun with --keep keeps it.
func TestDemoSchemaOwnership(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := newDemoSchemaName(t, pool)
	stray := pgx.Identifier{schema, "stray"}.Sanitize()

	prepare := func(t *testing.T, keep bool) string {
		t.Helper()
		var stderr bytes.Buffer
		d := &demo{opts: &demoOptions{schema: schema, accounts: 20, keep: keep}, pool: pool, stderr: &stderr}
		n, err := d.prepare(ctx)
		require.NoError(t, err, stderr.String())
		require.EqualValues(t, 20, n)
		state, err := querySchemaState(ctx, pool, schema)
		require.NoError(t, err)
		require.Equal(t, schemaOwned, state)
		return stderr.String()
	}
	strayExists := func(t *testing.T) bool {
		t.Helper()
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", stray).Scan(&ok))
		return ok
	}

	state, err := querySchemaState(ctx, pool, schema)
	require.NoError(t, err)
	require.Equal(t, schemaAbsent, state)

	require.Contains(t, prepare(t, false), "creating schema "+schema)
	_, err = pool.Exec(ctx, "CREATE TABLE "+stray+" (x int)")
	require.NoError(t, err)

	require.Contains(t, prepare(t, true), "keeping 20 existing accounts")
	require.True(t, strayExists(t), "--keep reuses the schema")

	require.Contains(t, prepare(t, false), "dropping and recreating schema "+schema+", created by an earlier demo")
	require.False(t, strayExists(t), "without --keep the demo's own schema is recreated")
}
