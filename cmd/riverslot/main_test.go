package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/demo"
	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		// pgconn's background reader of a connection being closed as the
		// last test ends (a CI run saw one in IO wait after Close).
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead"))
}

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	defer reserveCmdConns(t, args)()
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

	code, stdout, _ := runCmd(t, "help")
	require.Equal(t, 0, code)
	for _, cmd := range []string{"demo", "plan", "worker", "bench", "status", "web", "simulate", "serve", "migrate"} {
		require.Contains(t, stdout, "\n  "+cmd+" ", "usage lists %s", cmd)
		code, _, stderr := runCmd(t, cmd, "-h")
		require.Equal(t, 0, code, "%s -h", cmd)
		require.Contains(t, stderr, "usage: riverslot "+cmd+" [flags]")
	}
	require.Contains(t, stdout, "$DATABASE_URL")
}

// TestDatabaseURLConvention: every command that needs a database documents
// --database-url the same way in -h (a plain string flag, never a URL or a
// password from the environment as its default) and falls back to
// $DATABASE_URL.
func TestDatabaseURLConvention(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv("DATABASE_URL", "postgres://nobody:s3cret@127.0.0.1:1/fromenv?connect_timeout=2")

	for _, cmd := range []string{"demo", "worker", "bench"} {
		t.Run(cmd, func(t *testing.T) {
			code, _, stderr := runCmd(t, cmd, "-h")
			require.Equal(t, 0, code)
			require.Contains(t, stderr, "  -database-url string\n    \tPostgreSQL URL; default $DATABASE_URL, else postgres://postgres@127.0.0.1:5432/riverslot_")
			require.NotContains(t, stderr, "s3cret")
			require.NotContains(t, stderr, "fromenv")

			code, _, stderr = runCmd(t, cmd)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, "riverslot "+cmd+": cannot reach the database at nobody@127.0.0.1:1/fromenv")
			require.NotContains(t, stderr, "s3cret")
		})
	}
}

// TestDemoBadFlags: bad input exits 2 with one line naming the flag, before
// anything runs: the schema the demo would create does not exist afterwards.
func TestDemoBadFlags(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	past := "2020-01-01T00:00:00Z"
	farAhead := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"ZeroAccounts", []string{"--accounts", "0"}, "riverslot demo: --accounts must be at least 1, got 0"},
		{"NegativeRetention", []string{"--completed-retention", "-1s"}, "riverslot demo: --completed-retention must be 0 (River's default, 24h) or a positive duration such as 1m, got -1s"},
		{"NegativeAccounts", []string{"--accounts", "-5"}, "riverslot demo: --accounts must be at least 1, got -5"},
		{"OneSlotCycle", []string{"--cycle", "17s"}, "riverslot demo: --cycle: invalid cycle: Cycle 17s is an odd number of seconds and yields a single slot"},
		{"SubSecondCycle", []string{"--cycle", "500ms"}, "riverslot demo: --cycle must be at least 16s, got 500ms: River's scheduler promotes jobs every 5 s"},
		{"CycleOfOneAndAHalfSeconds", []string{"--cycle", "1500ms"}, "riverslot demo: --cycle must be at least 16s, got 1.5s"},
		{"CycleShorterThanRiversTick", []string{"--cycle", "8s"}, "riverslot demo: --cycle must be at least 16s, got 8s: River's scheduler promotes jobs every 5 s"},
		{"CycleLongerThanADay", []string{"--cycle", "25h"}, "riverslot demo: --cycle must be at most 24h0m0s, got 25h0m0s: this command runs compressed cycles and waits for them to finish"},
		{"ZeroCycles", []string{"--cycles", "0"}, "riverslot demo: --cycles must be at least 1, got 0"},
		{"NegativeWorkers", []string{"--workers", "-1"}, "riverslot demo: --workers must be between 1 and 10000 (River's limit per queue), or 0 to size it for the fleet, got -1"},
		{"TooManyWorkers", []string{"--workers", "10001"}, "riverslot demo: --workers must be between 1 and 10000 (River's limit per queue), or 0 to size it for the fleet, got 10001"},
		{"BadCycleStart", []string{"--cycle-start", "tomorrow"}, `riverslot demo: --cycle-start must be RFC 3339, e.g. 2026-11-22T10:00:00Z, got "tomorrow"`},
		{"CycleStartInThePast", []string{"--cycle-start", past}, "riverslot demo: --cycle-start " + past + " is in the past (now "},
		{"CycleStartFarAhead", []string{"--cycle-start", farAhead}, "riverslot demo: --cycle-start " + farAhead + " is more than 24h0m0s ahead"},
		{"EmptyTask", []string{"--task", ""}, `riverslot demo: --task must be 1-64 letters, digits, '_', '-' or '.', got ""`},
		{"TaskWithSpace", []string{"--task", "my task"}, `riverslot demo: --task must be 1-64 letters, digits, '_', '-' or '.', got "my task"`},
		{"InjectedSchema", []string{"--schema", `x"; DROP SCHEMA public; --`}, "riverslot demo: --schema must be a plain identifier"},
		{"LongSchema", []string{"--schema", strings.Repeat("s", 64)}, "riverslot demo: --schema must be 1-63 bytes (Postgres' identifier limit)"},
		{"SystemSchema", []string{"--schema", "pg_demo"}, `riverslot demo: --schema must not start with pg_ (reserved for Postgres' system schemas), got "pg_demo"`},
		{"UnreachableDatabase", []string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, "riverslot demo: cannot reach the database at nobody@127.0.0.1:1/none"},
		{"MalformedURL", []string{"--database-url", "postgres://%zz"}, "riverslot demo: --database-url is not a valid PostgreSQL URL"},
		{"UnknownWeights", []string{"--weights", "zipf"}, `riverslot demo: --weights must be pareto (or omitted for unweighted accounts), got "zipf"`},
		{"UnknownFlag", []string{"--frob"}, "flag provided but not defined: -frob"},
		{"BadLogLevel", []string{"--log-level", "chatty"}, `invalid value "chatty" for flag -log-level`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			schema := newDemoSchemaName(t, pool)
			args := append([]string{"demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema}, tt.args...)
			code, stdout, stderr := runCmd(t, args...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tt.want)
			require.NotContains(t, stderr, "goroutine", "no stack trace")
			if tt.args[0] != "--frob" && tt.args[0] != "--log-level" { // the flag package prints usage after its own line
				require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
			}
			state, err := demo.QuerySchemaState(ctx, pool, schema)
			require.NoError(t, err)
			require.Equal(t, demo.SchemaAbsent, state, "refused before creating the schema")
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
		require.Contains(t, out, "pinned         unknown: a weighted task may pin it elsewhere; pass --database-url")
		require.Contains(t, out, "current cycle  2026-11-22T00:30:00Z")

		// Next syncs are one cycle apart and inside slot 100's window.
		syncs := parseSyncs(out)
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
			{[]string{"--cycle", "17s"}, "riverslot plan: --cycle: invalid cycle"},
			{[]string{"--cycle", "1500ms"}, "riverslot plan: --cycle must be at least 16s, got 1.5s"},
			{[]string{"--anchor", "25:00"}, `riverslot plan: --anchor: want HH:MM or HH:MM:SS, got "25:00"`},
			{[]string{"--tz", "Mars/Olympus"}, `riverslot plan: --tz: unknown time zone "Mars/Olympus"`},
			{[]string{"--account", "not-a-uuid"}, `riverslot plan: --account must be a UUID such as 0b6e4f2a-8c1d-4f5e-9a7b-3c2d1e0f9a8b, got "not-a-uuid"`},
			{[]string{"--cycle", "256s", "--tz", "UTC"}, "Cycle must divide 24h when Location is set"},
			{[]string{"--task", "", "--account", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"}, `riverslot plan: --task must be 1-64 letters, digits, '_', '-' or '.', got ""`},
			{[]string{"--now", "yesterday"}, "riverslot plan: --now must be RFC 3339"},
		} {
			code, stdout, stderr := runCmd(t, append([]string{"plan"}, tt.args...)...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, tt.want)
			require.Empty(t, stdout, "refused before printing anything")
		}
	})

	// Zones whose DST change happens at midnight: plan finishes and prints
	// three increasing sync times (it spun forever before slotplan's fix).
	t.Run("DSTAtMidnightFinishes", func(t *testing.T) {
		t.Parallel()

		for _, tt := range []struct{ tz, now string }{
			{"America/Havana", "2025-03-08T06:00:00Z"},
			{"America/Santiago", "2025-09-06T06:00:00Z"},
			{"Atlantic/Azores", "2025-03-29T06:00:00Z"},
		} {
			code, stdout, stderr := runCmd(t, "plan", "--cycle", "24h", "--anchor", "00:00", "--tz", tt.tz, "--now", tt.now,
				"--account", "6ba7b810-9dad-11d1-80b4-00c04fd430c8")
			require.Equal(t, 0, code, "%s: %s", tt.tz, stderr)
			now, err := time.Parse(time.RFC3339, tt.now)
			require.NoError(t, err)
			syncs := parseSyncs(stdout)
			require.Len(t, syncs, 3, tt.tz)
			prev := now
			for _, s := range syncs {
				require.True(t, s.After(prev), "%s: %s not after %s", tt.tz, s, prev)
				prev = s
			}
		}
	})

	t.Run("OppositeTask", func(t *testing.T) {
		t.Parallel()

		// Bucket 0x8b = 139: slot 139/2 = 69 of 128; the opposite task
		// serves it 64 slots further round, in slot 5.
		code, stdout, stderr := runCmd(t, "plan", "--cycle", "24h", "--task", "payments", "--opposite", "reports",
			"--account", "0b6e4f2a-8c1d-4f5e-9a7b-3c2d1e0f9a8b", "--now", "2026-11-22T02:00:00Z")
		require.Equal(t, 0, code, stderr)
		payments, reports, ok := strings.Cut(stdout[strings.Index(stdout, "task           payments"):], "task           reports")
		require.True(t, ok, stdout)
		require.Contains(t, payments, "slot           69 of 128")
		require.Contains(t, reports, "(slots shifted by 64)\nslot           5 of 128")
		p, r := parseSyncs(payments), parseSyncs(reports)
		require.Len(t, p, 3)
		require.Len(t, r, 3)
		d := r[0].Sub(p[0]) % (24 * time.Hour)
		require.GreaterOrEqual(t, min(d, 24*time.Hour-d), 12*time.Hour-11*time.Minute-15*time.Second, "half a cycle minus a slot apart")

		code, _, stderr = runCmd(t, "plan", "--phase", "0.3")
		require.Equal(t, 2, code)
		require.Contains(t, stderr, "--phase × slots must be a whole number of slots, got 0.3 × 128 = 38.4")
	})

	t.Run("InterruptedStops", func(t *testing.T) {
		t.Parallel()

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var stdout, stderr bytes.Buffer
		code := run(ctx, []string{"plan", "--account", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"}, &stdout, &stderr)
		require.Equal(t, 130, code, stderr.String())
		require.Contains(t, stderr.String(), "riverslot plan: interrupted")
	})
}

func parseSyncs(out string) []time.Time {
	var syncs []time.Time
	for _, line := range strings.Split(out, "\n") {
		if ts, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(line)); err == nil {
			syncs = append(syncs, ts)
		}
	}
	return syncs
}

// TestDemoJSON runs a short real demo cycle against Postgres and checks the
// JSON summary against the database and against the definition of the
// slots, and its peak pending against the README's queue-depth promise.
// (TestDemoShortRetention runs two cycles.)
func TestDemoJSON(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := newDemoSchemaName(t, pool)

	const (
		accounts = 500
		cycle    = 64 * time.Second
		slots    = 64 // gcd(64, 256): slots of 1s
	)
	code, stdout, stderr := runCmd(t, "demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--accounts", fmt.Sprint(accounts), "--cycle", cycle.String(), "--cycles", "1", "--fanout-baseline", "--json")
	require.Equal(t, 0, code, "stderr:\n%s", stderr)
	require.Contains(t, stderr, "cycle 1/1")

	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &raw), stdout)
	for _, key := range []string{"schema", "accounts_table", "id_column", "sync_kind", "buckets", "slots",
		"slot_duration_seconds", "cycle_seconds", "cycle_starts", "accounts", "synced", "missed", "duplicates",
		"peak_queue_depth", "lateness_p50_seconds", "lateness_p99_seconds"} {
		require.Contains(t, raw, key)
	}

	var s demo.Summary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s))
	require.Equal(t, schema, s.Schema)
	require.EqualValues(t, accounts, s.Accounts)
	require.EqualValues(t, slots, s.Slots)
	require.InDelta(t, 1.0, s.SlotDurationSeconds, 1e-9)
	require.InDelta(t, cycle.Seconds(), s.CycleSeconds, 1e-9)
	require.Len(t, s.CycleStarts, 1)
	requireDemoSynced(t, &s, accounts)
	// The live fan-out's rate, from the ledger's slot rows, and River's
	// raw insert of a mean slot's jobs after the run, cleaned up.
	require.Positive(t, s.FanOutSlots)
	require.LessOrEqual(t, s.FanOutSlots, int64(slots))
	require.Positive(t, s.FanOutAccountsPerSecond)
	require.NotNil(t, s.FanOutRawPerSecond)
	require.Positive(t, *s.FanOutRawPerSecond)
	require.InDelta(t, s.FanOutAccountsPerSecond / *s.FanOutRawPerSecond, *s.FanOutVsRaw, 1e-9)
	var leftover int64
	require.NoError(t, riverslottest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" WHERE kind NOT IN ($1, $2, $3, $4)", bootstrap.Kind, perslot.Kind, syncjob.Kind, bootstrap.CensusKind).Scan(&leftover))
	require.Zero(t, leftover, "the raw baseline's jobs are deleted")

	// riverslot status on the cycle, as an operator would: --task
	// alone (the cycle, its plan and grid come from the jobs, not from
	// repeating the demo's --cycle), --json, exit 0 when on track.
	svg := filepath.Join(t.TempDir(), "cycle.svg")
	code, out, errOut := runCmd(t, "status", "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--task", "demo", "--cycle-start", s.CycleStarts[0], "--json", "--svg", svg)
	require.Equal(t, 0, code, "stderr:\n%s", errOut)
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	for _, key := range []string{"task", "cycle_start", "slots", "slots_done", "slots_failed", "accounts_expected",
		"sync_enqueued", "sync_completed", "sync_failed", "lateness_p50_seconds", "lateness_p99_seconds", "per_slot"} {
		require.Contains(t, st, key)
	}
	require.Equal(t, s.CycleStarts[0], st["cycle_start"])
	require.EqualValues(t, slots, st["slots_done"])
	require.EqualValues(t, 0, st["slots_failed"])
	require.EqualValues(t, accounts, st["accounts_expected"])
	require.EqualValues(t, accounts, st["sync_enqueued"])
	require.EqualValues(t, accounts, st["sync_completed"])
	require.Equal(t, "on track", st["verdict"])
	require.Len(t, st["per_slot"], slots)
	// --svg drew the same cycle: every slot done, the verdict in the title.
	text, fills := svgText(t, svg)
	require.Contains(t, text, "cycle "+s.CycleStarts[0]+": on track")
	require.True(t, fills[fillOf(t, riverslot.SlotDone)])
	require.False(t, fills[fillOf(t, riverslot.SlotFailed)])

	code, _, errOut = runCmd(t, "status", "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--task", "demo", "--cycle", cycle.String(), "--cycle-start", "2026-01-01T00:00:03Z")
	require.Equal(t, 2, code, "a cycle start without jobs, off the task's grid, is bad input")
	require.Contains(t, errOut, `--cycle-start: cycleStart 2026-01-01T00:00:03Z is not a cycle start of task "demo" and the ledger records no cycle of the task starting then`)
	code, _, errOut = runCmd(t, "status", "--database-url", riverslottest.DatabaseURL(), "--schema", "no_such_schema", "--task", "demo")
	require.Equal(t, 2, code, "a schema without River's tables is bad input: %s", errOut)
	require.Contains(t, errOut, `--schema "no_such_schema" has no river_job table; give the schema of the app's River tables`)
	outdated := riverslottest.Schema(ctx, t, pool)
	_, err := pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{outdated, "riverslot_ledger"}.Sanitize()+" DROP COLUMN first_cycle")
	require.NoError(t, err)
	code, _, errOut = runCmd(t, "status", "--database-url", riverslottest.DatabaseURL(), "--schema", outdated, "--task", "demo")
	require.Equal(t, 2, code, "a ledger of an older version is bad input: %s", errOut)
	require.Contains(t, errOut, "was made by an older riverslot and lacks columns this version records; run riverslot.Migrate")

	// Accounts per slot, from the seeded ids (slot = last byte / 4).
	rows, err := pool.Query(ctx, "SELECT id FROM "+pgx.Identifier{schema, "accounts"}.Sanitize())
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	perSlot := make([]int64, slots)
	for _, id := range ids {
		perSlot[int(id[15])/(256/slots)]++
	}

	// Low queue depth, by construction rather than by a figure once seen.
	//
	// No account is enqueued earlier than Lead (the default, min(10 s,
	// slot/2) = 0.5 s) before its slot: a per-slot job runs no earlier,
	// and the syncs it inserts are its own. However late the machine runs
	// them, this holds; enqueueing a whole cycle at once breaks it.
	slot := time.Duration(s.SlotDurationSeconds * float64(time.Second))
	lead := min(riverslot.LeadMax, slot/2)
	var early int64
	var earliest float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE ahead > $2), coalesce(max(ahead), 0) FROM (
			SELECT extract(epoch FROM (args->>'cycle_start')::timestamptz + (args->>'slot')::int * $1 * interval '1 second' - created_at)::float8 AS ahead
			FROM `+pgx.Identifier{schema, "river_job"}.Sanitize()+` WHERE kind = 'riverslot_sync') s`,
		s.SlotDurationSeconds, lead.Seconds()).Scan(&early, &earliest))
	require.Zero(t, early, "sync jobs enqueued more than the lead (%s) before their slot; the earliest %.3fs before", lead, earliest)

	// Peak pending (sync jobs inserted, not yet started), against the
	// README's bound, (1 + lead/slot) x accounts/slots plus 5 s of a slot
	// (River's scheduler tick), with 20 s of a slot more for the load: at
	// least the largest slot (a slot's jobs are inserted in one batch,
	// 500/64 ~ 8 accounts, before any of them can start), at most that
	// bound. On a loaded machine River's ticks and fetches lag and late
	// fan-outs spread their accounts over catch-up windows, which adds
	// pending jobs in proportion to the time lost: with four demos and a
	// 20,000-account one at once on 2 cores (load average above 30), the
	// excess over (1 + lead/slot) x accounts/slots reached 14.5 s of a
	// slot's accounts. The cycle has 64 slots so that the bound stays well
	// below enqueueing the cycle at once (all 500 pending).
	perSlotMean := float64(accounts) / slots
	readme := (1+lead.Seconds()/slot.Seconds())*perSlotMean + 5/slot.Seconds()*perSlotMean
	bound := readme + 20/slot.Seconds()*perSlotMean
	t.Logf("peak pending %d; largest slot %d; README's bound %.0f, with 20 s of a slot for the load %.0f; enqueueing at once: %d; lateness p99 %.2fs",
		s.PeakQueueDepth, slices.Max(perSlot), readme, bound, accounts, s.LatenessP99Seconds)
	require.Less(t, bound, accounts/2.0, "the bound is well below enqueueing everything at once")
	require.GreaterOrEqual(t, s.PeakQueueDepth, slices.Max(perSlot))
	require.LessOrEqual(t, float64(s.PeakQueueDepth), bound)

	// Buckets counted independently from the seeded ids.
	seen := map[byte]bool{}
	for _, id := range ids {
		seen[id[15]] = true
	}
	require.EqualValues(t, len(seen), s.Buckets)
}

// TestDemoReciprocal runs the demo with a second task opposite the first
// and checks, against the database, that each task syncs every account once
// and that no account's two syncs come closer than half a cycle minus a
// slot on the cycle circle.
// TestDemoWeights runs a weighted demo cycle and checks, from the job table
// and the accounts rather than the summary, that every account was synced
// once, each in its pinned or hash slot, and that the heaviest slot is
// within Balance's bound and lighter than with hash placement alone.
func TestDemoWeights(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := newDemoSchemaName(t, pool)
	const accounts = 4_000
	code, stdout, stderr := runCmd(t, "demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--accounts", fmt.Sprint(accounts), "--cycle", "32s", "--weights", "pareto", "--json")
	require.Equal(t, 0, code, "stderr:\n%s", stderr)

	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &raw), stdout)
	for _, key := range []string{"schema", "accounts_table", "id_column", "sync_kind", "buckets", "slots",
		"slot_duration_seconds", "cycle_seconds", "cycle_starts", "accounts", "synced", "missed", "duplicates",
		"peak_queue_depth", "lateness_p50_seconds", "lateness_p99_seconds", "tasks", "per_task",
		"weights", "slot_weight_max_over_mean", "hash_slot_weight_max_over_mean", "heaviest_account_over_mean_slot", "pinned"} {
		require.Contains(t, raw, key, "every key of an unweighted run, and the weights")
	}
	var s demo.Summary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s))
	require.Len(t, s.CycleStarts, 1)

	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	pins := pgx.Identifier{schema, "riverslot_pins"}.Sanitize()
	var synced, misplaced int64
	var balanced, hash, heaviest float64
	require.NoError(t, pool.QueryRow(ctx, `WITH j AS (
			SELECT (args->>'account_id')::uuid AS id, (args->>'slot')::int AS slot FROM `+jobs+`
			WHERE kind = 'riverslot_sync' AND (args->>'cycle_start')::timestamptz = $1::timestamptz),
		served AS (
			SELECT a.id, a.weight, coalesce(p.slot, get_byte(uuid_send(a.id), 15) / 8) AS slot, get_byte(uuid_send(a.id), 15) / 8 AS hash_slot
			FROM `+table+` a LEFT JOIN `+pins+` p ON p.account_id = a.id AND p.cycle_start = $1::timestamptz)
		SELECT (SELECT count(DISTINCT id) FROM j),
			(SELECT count(*) FROM j JOIN served USING (id) WHERE j.slot <> served.slot),
			(SELECT max(w) / (sum(w) / 32) FROM (SELECT j.slot, sum(weight) AS w FROM j JOIN served USING (id) GROUP BY 1) x),
			(SELECT max(w) / (sum(w) / 32) FROM (SELECT hash_slot, sum(weight) AS w FROM served GROUP BY 1) x),
			(SELECT max(weight) / (sum(weight) / 32) FROM served)`, s.CycleStarts[0]).
		Scan(&synced, &misplaced, &balanced, &hash, &heaviest))
	t.Logf("synced %d, misplaced %d; max/mean balanced %.3f, hash-only %.3f, heaviest account %.3f", synced, misplaced, balanced, hash, heaviest)
	require.EqualValues(t, accounts, synced)
	require.Zero(t, s.Duplicates)
	if misplaced > 0 {
		rows, err := pool.Query(ctx, `SELECT j.args->>'account_id', j.args->>'slot', p.slot, p.cycle_start, get_byte(uuid_send(a.id), 15) / 8, j.scheduled_at, j.created_at
			FROM `+jobs+` j JOIN `+table+` a ON a.id = (j.args->>'account_id')::uuid LEFT JOIN `+pins+` p ON p.account_id = a.id
			WHERE j.kind = 'riverslot_sync' AND (j.args->>'cycle_start')::timestamptz = $1::timestamptz LIMIT 12`, s.CycleStarts[0])
		require.NoError(t, err)
		for rows.Next() {
			vals, _ := rows.Values()
			t.Logf("sync job: %v", vals)
		}
		rows.Close()
		var cycles []string
		rows, err = pool.Query(ctx, "SELECT cycle_start::text || ' ' || pinned::text FROM "+pgx.Identifier{schema, "riverslot_pin_cycles"}.Sanitize())
		require.NoError(t, err)
		cycles, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		t.Logf("pin cycles: %v; summary cycle starts %v", cycles, s.CycleStarts)
	}
	require.Zero(t, misplaced, "every sync in the slot its pin or hash says")
	// The target: max(1.10, w + 0.10); a giant (w above about 1/2) gets a
	// slot of its own.
	require.LessOrEqual(t, balanced, max(1.10, heaviest+0.10))
	require.Less(t, balanced, hash, "balancing lowers the heaviest slot")
	require.InDelta(t, balanced, *s.SlotWeightMaxOverMean, 1e-9)
	require.InDelta(t, hash, *s.HashSlotWeightMaxOverMean, 1e-9)
	require.Positive(t, *s.Pinned)

	// plan --account reads the pin of the heaviest account, and of one
	// account that kept its hash slot, in the latest pinned cycle (the
	// trigger may have bootstrapped the next one before the demo stopped).
	var pinnedID, hashID string
	var pinnedSlot int
	var latest time.Time
	latestSQL := "(SELECT max(cycle_start) FROM " + pgx.Identifier{schema, "riverslot_pin_cycles"}.Sanitize() + ")"
	require.NoError(t, pool.QueryRow(ctx, "SELECT account_id::text, slot, cycle_start FROM "+pins+" WHERE cycle_start = "+latestSQL+" ORDER BY weight DESC LIMIT 1").Scan(&pinnedID, &pinnedSlot, &latest))
	require.NoError(t, pool.QueryRow(ctx, "SELECT id::text FROM "+table+" a WHERE NOT EXISTS (SELECT 1 FROM "+pins+" p WHERE p.account_id = a.id AND p.cycle_start = "+latestSQL+") LIMIT 1").Scan(&hashID))
	planArgs := func(id string) []string {
		return []string{"plan", "--cycle", "32s", "--task", "demo", "--account", id, "--database-url", riverslottest.DatabaseURL(), "--pins-schema", schema}
	}
	code, out, stderr := runCmd(t, planArgs(pinnedID)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, fmt.Sprintf("pinned         yes: to slot %d in the cycle of %s", pinnedSlot, latest.UTC().Format(time.RFC3339)))
	code, out, stderr = runCmd(t, planArgs(hashID)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "pinned         no: it keeps its hash slot in the latest pinned cycle, "+latest.UTC().Format(time.RFC3339))
}

func TestDemoReciprocal(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := newDemoSchemaName(t, pool)
	const accounts = 400
	code, stdout, stderr := runCmd(t, "demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--accounts", fmt.Sprint(accounts), "--cycle", "40s", "--reciprocal", "--json")
	require.Equal(t, 0, code, "stderr:\n%s", stderr)

	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &raw), stdout)
	for _, key := range []string{"schema", "accounts_table", "id_column", "sync_kind", "buckets", "slots",
		"slot_duration_seconds", "cycle_seconds", "cycle_starts", "accounts", "synced", "missed", "duplicates",
		"peak_queue_depth", "lateness_p50_seconds", "lateness_p99_seconds", "tasks", "per_task"} {
		require.Contains(t, raw, key, "every key of a one-task run, and the tasks")
	}
	var s demo.Summary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s))
	require.Equal(t, []string{"demo", "demo_opposite"}, s.Tasks)

	// Independently of the summary: one sync per account per task, and the
	// two tasks' syncs of an account at least 20 s - 5 s apart on the 40 s
	// circle (8 slots of 5 s). The promise covers syncs at their regular
	// times, inside their slot; a fan-out that ran more than LateGrace late
	// on a loaded machine spreads its accounts after the slot (a catch-up),
	// which is left out here as in the demo's own figure, and counted.
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	var perTaskAccounts, duplicates, late int64
	var closest float64
	require.Len(t, s.CycleStarts, 1)
	cycle := "(args->>'cycle_start')::timestamptz = $1::timestamptz" // the next cycle may have begun before the demo stopped
	require.NoError(t, pool.QueryRow(ctx, `SELECT
			(SELECT count(DISTINCT (args->>'task', args->>'account_id')) FROM `+jobs+` WHERE kind = 'riverslot_sync' AND `+cycle+`),
			(SELECT count(*) - count(DISTINCT (args->>'task', args->>'account_id')) FROM `+jobs+` WHERE kind = 'riverslot_sync' AND `+cycle+`),
			(SELECT min(least(m, 40 - m))::float8 FROM (
				SELECT mod(mod(extract(epoch FROM b.scheduled_at - a.scheduled_at), 40) + 40, 40) AS m
				FROM `+jobs+` a JOIN `+jobs+` b ON b.args->>'account_id' = a.args->>'account_id' AND b.args->>'cycle_start' = a.args->>'cycle_start'
				WHERE a.kind = 'riverslot_sync' AND b.kind = 'riverslot_sync' AND a.args->>'task' = 'demo' AND b.args->>'task' = 'demo_opposite'
				  AND (a.`+cycle[1:]+`
				  AND a.scheduled_at < (a.args->>'cycle_start')::timestamptz + ((a.args->>'slot')::int + 1) * interval '5 seconds'
				  AND b.scheduled_at < (b.args->>'cycle_start')::timestamptz + ((b.args->>'slot')::int + 1) * interval '5 seconds') d),
			(SELECT count(*) FROM `+jobs+` WHERE kind = 'riverslot_sync' AND `+cycle+`
				AND scheduled_at >= (args->>'cycle_start')::timestamptz + ((args->>'slot')::int + 1) * interval '5 seconds')`, s.CycleStarts[0]).
		Scan(&perTaskAccounts, &duplicates, &closest, &late))
	require.EqualValues(t, 2*accounts, perTaskAccounts)
	require.Zero(t, duplicates)
	require.Less(t, late, int64(accounts/4), "most syncs at their regular time, or the check says little")
	require.GreaterOrEqual(t, closest, 15.0)
	require.NotNil(t, s.ReciprocalLateSyncs)
	require.Equal(t, late, *s.ReciprocalLateSyncs)
	require.NotNil(t, s.ReciprocalMinDistanceSeconds)
	require.InDelta(t, closest, *s.ReciprocalMinDistanceSeconds, 1e-6)
	require.InDelta(t, 15.0, *s.ReciprocalMinPromisedSeconds, 1e-9)
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
		{[]string{"bench", "--text-slots", "129"}, "riverslot bench: --text-slots must be between 1 and 128 (the slots of the 24h cycle it samples), got 129"},
		{[]string{"bench", "--depth-cycle", "25h"}, "riverslot bench: --depth-cycle must be at most 24h0m0s, got 25h0m0s"},
		{[]string{"bench", "--depth-cycle", "17s"}, "riverslot bench: --depth-cycle: invalid cycle"},
		{[]string{"bench", "--depth-work", "-1s"}, "riverslot bench: --depth-work must not be negative, got -1s"},
		{[]string{"bench", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, "riverslot bench: cannot reach the database"},
		{[]string{"worker", "--workers", "0"}, "riverslot worker: --workers must be between 1 and 10000 (River's limit per queue), got 0"},
		{[]string{"worker", "--completed-retention", "-1m"}, "riverslot worker: --completed-retention must be 0 (River's default, 24h) or a positive duration such as 1m, got -1m0s"},
		{[]string{"worker", "--cycle", "25h"}, "riverslot worker: --cycle must be at most 24h0m0s, got 25h0m0s: this command runs compressed cycles"},
		{[]string{"worker", "--cycle", "17s"}, "riverslot worker: --cycle: invalid cycle"},
		{[]string{"worker", "--rescue-after", "-1s"}, "riverslot worker: --rescue-after must not be negative, got -1s"},
		{[]string{"worker", "--phase", "1"}, "riverslot worker: --phase must be in [0, 1) (a fraction of the cycle, Task.Phase), got 1"},
		{[]string{"worker", "--phase", "NaN"}, "riverslot worker: --phase must be in [0, 1) (a fraction of the cycle, Task.Phase), got NaN"},
		{[]string{"worker", "--cycle", "120s", "--phase", "0.3"}, "riverslot worker: --phase must be a whole number of slots: 0.3 x 8 slots = 2.4; use a multiple of 1/8"},
		{[]string{"bench", "--synctier-workers", "0"}, "riverslot bench: --synctier-workers must be between 1 and 10000 (River's limit per queue), got 0"},
		{[]string{"bench", "--synctier-jobs", "0"}, "riverslot bench: --synctier-jobs must be at least 1, got 0"},
		{[]string{"status", "--phase", "-0.5"}, "riverslot status: --phase must be in [0, 1) (a fraction of the cycle, Task.Phase), got -0.5"},
		{[]string{"worker", "--seed", "-1"}, `invalid value "-1" for flag -seed`},
		{[]string{"worker", "--per-slot-timeout", "-1s"}, "riverslot worker: --per-slot-timeout must not be negative, got -1s"},
		{[]string{"worker", "--accounts-schema", "pg_catalog"}, "riverslot worker: --accounts-schema must not start with pg_"},
		{[]string{"worker", "--schema", strings.Repeat("s", 64)}, "riverslot worker: --schema must be 1-63 bytes"},
		{[]string{"worker", "--log-level", "chatty"}, `invalid value "chatty" for flag -log-level`},
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
	markDemoSchema(ctx, t, pool, schema)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)
	base := []string{"worker", "--database-url", riverslottest.DatabaseURL(), "--schema", schema}

	code, _, stderr := runCmd(t, append(base, "--table", "missing")...)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `Table "`+schema+`"."missing" does not exist`)

	// --filter reaches the task: Check reports the column it names.
	code, _, stderr = runCmd(t, append(base, "--filter", "no_such_column")...)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "no_such_column")

	// --accounts-schema reaches the task: the accounts are looked up there.
	other := riverslottest.EmptySchema(ctx, t, pool)
	code, _, stderr = runCmd(t, append(base, "--accounts-schema", other)...)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `Table "`+other+`"."accounts" does not exist`)
}

// signalWriter closes started when a line "worker ... started" is written.
type signalWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	started chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), " started\n") && w.started != nil {
		close(w.started)
		w.started = nil
	}
	return n, err
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// runWorkerUntilStarted runs `riverslot worker` with args until it has
// started, then interrupts it, and returns its exit code, stdout and stderr.
func runWorkerUntilStarted(t *testing.T, args ...string) (int, string, string) {
	t.Helper()

	stdout, stderr, stop := startWorkerCmd(t, args...)
	code := stop()
	return code, stdout.String(), stderr.String()
}

// startWorkerCmd runs `riverslot worker` with args in the test process until
// it has started; stop interrupts it and returns its exit code.
func startWorkerCmd(t *testing.T, args ...string) (stdout, stderr *signalWriter, stop func() int) {
	t.Helper()

	reserveCmdConns(t, append([]string{"worker"}, args...)) // given back when the test ends
	ctx, cancel := context.WithCancel(context.Background())
	stdout = &signalWriter{started: make(chan struct{})}
	started := stdout.started
	stderr = &signalWriter{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"worker"}, args...), stdout, stderr) }()
	select {
	case <-started:
	case code := <-done:
		cancel()
		t.Fatalf("worker exited with %d before starting:\n%s", code, stderr.String())
	}
	var once sync.Once
	var code int
	stop = func() int {
		once.Do(func() {
			cancel()
			code = <-done
		})
		return code
	}
	t.Cleanup(func() { stop() }) // a failed assertion still stops the worker
	return stdout, stderr, stop
}

// TestWorkerSeparateSchemas runs workers whose accounts live in another
// schema than River's tables, with a filter of their own, until interrupted:
// each starts, says whether it records syncs, and stops cleanly. River's info
// lines show only with --log-level info.
func TestWorkerSeparateSchemas(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	riverSchema := riverslottest.Schema(ctx, t, pool)
	markDemoSchema(ctx, t, pool, riverSchema)
	accountsSchema := riverslottest.EmptySchema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, accountsSchema, "customers", 10)
	args := []string{"--database-url", riverslottest.DatabaseURL(), "--schema", riverSchema,
		"--accounts-schema", accountsSchema, "--table", "customers", "--filter", "active AND id IS NOT NULL", "--max-conns", "3"}

	for _, tt := range []struct {
		name      string
		args      []string
		riverInfo bool
	}{
		{"DefaultLogLevel", nil, false},
		{"LogLevelInfo", []string{"--log-level", "info"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runWorkerUntilStarted(t, append(args, tt.args...)...)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, stdout, "stopped")
			require.Contains(t, stderr, `msg="not recording syncs: no such table" table=`+riverSchema+".synced")
			if tt.riverInfo {
				require.Contains(t, stderr, `msg="River client started"`)
			} else {
				require.NotContains(t, stderr, `msg="River client started"`)
			}
		})
	}
}

// TestDemoKeepResumes interrupts a demo in the middle of its cycle and
// reruns it with --keep: the second run resumes the same cycle (same
// accounts, same cycle start) and every account is synced exactly once.
func TestDemoKeepResumes(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := newDemoSchemaName(t, pool)
	args := []string{"demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--accounts", "400", "--cycle", "32s"}
	// Both runs' connections, so the rerun starts at once: it must find the
	// cycle unfinished (before start + 32 s).
	holdCmdConns(t, args)

	// First run: cancelled (as by Ctrl-C) mid-cycle, once its progress line
	// says the eighth of the 32 one-second slots has begun (not after a
	// fixed time: a busy machine may still be building the index then),
	// about 7 s into the cycle: the rerun has about 25 s to start.
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var stdout bytes.Buffer
	stderr := &cancelOnMatch{re: regexp.MustCompile(`cycle 1/1 slot ([89]|[1-3][0-9])/32`), cancel: cancel}
	code := run(runCtx, args, &stdout, stderr)
	require.True(t, stderr.matched(), "the demo never reached slot 8 of its cycle; stderr:\n%s", stderr.String())
	require.Equal(t, 130, code, "stderr:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "interrupted; rerun with --keep to resume the same cycle")

	var firstStart time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT max((args->>'cycle_start')::timestamptz) FROM "+
		pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE kind = 'riverslot_bootstrap'").Scan(&firstStart))

	code, out, errOut := runCmd(t, append(args, "--keep", "--json")...)
	require.Equal(t, 0, code, "stderr:\n%s", errOut)
	require.Contains(t, errOut, "keeping 400 existing accounts")
	require.Contains(t, errOut, "found unfinished cycle "+firstStart.UTC().Format(time.RFC3339)+"; resuming it")

	var s demo.Summary
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	require.Equal(t, []string{firstStart.UTC().Format(time.RFC3339)}, s.CycleStarts)
	require.EqualValues(t, 400, s.Accounts)
	requireDemoSynced(t, &s, 400)
}

// cancelOnMatch is a writer that keeps what is written and calls cancel the
// first time the text written so far matches re.
type cancelOnMatch struct {
	re     *regexp.Regexp
	cancel context.CancelFunc

	mu   sync.Mutex
	buf  bytes.Buffer
	done bool
}

func (w *cancelOnMatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if !w.done && w.re.Match(w.buf.Bytes()) {
		w.done = true
		w.cancel()
	}
	return n, err
}

func (w *cancelOnMatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *cancelOnMatch) matched() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
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
			{"--keep", "--cycle", "16s", "--cycle-start", future},
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

// reserveCmdConns reserves, in the test binary's connection budget
// (riverslottest.ReserveConnections), the connections `riverslot args...`
// run in-process may open, by the pool sizes of its commands: demo
// min(20, --workers+5) plus its monitor (and min(10, --workers+2) on an
// accounts database), worker --max-conns (twice with an accounts database),
// status and web 4, plan 1, bench 30. Commands that do not reach a
// database reserve nothing.
func reserveCmdConns(t *testing.T, args []string) (release func()) {
	t.Helper()
	if _, held := cmdConnsHeld.Load(t); held {
		return func() {}
	}
	if len(args) == 0 || !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--database-url") }) {
		return func() {}
	}
	flag := func(name string, def int) int {
		for i, a := range args {
			v, ok := strings.CutPrefix(a, name+"=")
			if !ok && a == name && i+1 < len(args) {
				v, ok = args[i+1], true
			}
			if n, err := strconv.Atoi(v); ok && err == nil {
				return n
			}
		}
		return def
	}
	accountsDB := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--accounts-database-url") })
	n := 0
	switch args[0] {
	case "demo":
		workers := flag("--workers", 0)
		if workers == 0 {
			workers = 50 // sized for the fleet: at least 50
		}
		n = min(20, workers+5) + 1
		if accountsDB {
			n += min(10, workers+2)
		}
	case "worker":
		n = flag("--max-conns", 10)
		if accountsDB {
			n *= 2
		}
	case "status", "web":
		n = 4
	case "plan":
		n = 1
	case "bench":
		n = 30
	}
	return riverslottest.ReserveConnections(t, n)
}

// cmdConnsHeld holds the tests that reserved their commands' connections
// for their whole run (holdCmdConns); runCmd does not reserve again for them.
var cmdConnsHeld sync.Map

// holdCmdConns reserves what `riverslot args...` may open until the test
// ends, for a test whose commands must follow each other without waiting
// for connections in between.
func holdCmdConns(t *testing.T, args []string) {
	t.Helper()
	reserveCmdConns(t, args)
	cmdConnsHeld.Store(t, true)
	t.Cleanup(func() { cmdConnsHeld.Delete(t) })
}

// requireDemoSynced asserts a demo run's account-cycles, counted from the
// demo's record of its Sync calls: each synced once, or missed with its
// sync job skipped for a recorded reason (stale on a busy machine, an
// upstream throttled or down), never missed without one nor synced twice;
// skips a minority.
func requireDemoSynced(t *testing.T, s *demo.Summary, accountCycles int64) {
	t.Helper()
	t.Logf("demo: %d account-cycles synced once, %d missed (%d with a skip reason), %d twice", s.Synced, s.Missed, s.MissedSkipped, s.Duplicates)
	require.Equal(t, s.MissedSkipped, s.Missed, "account-cycles missed without a skip reason")
	require.Equal(t, accountCycles, s.Synced+s.Missed, "every account-cycle synced once or skipped with a reason")
	require.Zero(t, s.Duplicates, "account-cycles whose Sync was called twice")
	require.LessOrEqual(t, 2*s.MissedSkipped, accountCycles, "most syncs call Sync")
}
