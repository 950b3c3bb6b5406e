package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

func TestMain(m *testing.M) { riverslottest.RunTests(m) }

// TestPrune: each cycle is pruned by its own plan's keep_until, with its
// slots: after a change from a 24 h to a 1 h cycle, the 24 h cycle still
// running keeps its rows while the 1 h cycles past their horizon go. Rows
// written before keep_until existed go by the pruning node's cutoff.
func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	led := ledger.New(schema)
	now := time.Now().UTC().Truncate(time.Second)

	type cycle struct {
		plan  string
		start time.Time
		keep  *time.Time // nil: a row of the previous version
		kept  bool
	}
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	cycles := map[string]cycle{
		"24h plan, running":          {"86400s/128/1", now.Add(-20 * time.Hour), at(4*24*time.Hour + time.Hour - 20*time.Hour), true},
		"1h plan, past its horizon":  {"3600s/16/1", now.Add(-6 * time.Hour), at(-time.Hour), false},
		"1h plan, within":            {"3600s/16/1", now.Add(-2 * time.Hour), at(3 * time.Hour), true},
		"old row, before the cutoff": {"3600s/16/1", now.Add(-30 * time.Hour), nil, false},
		"old row, after the cutoff":  {"3600s/16/1", now.Add(-3 * time.Hour), nil, true},
	}
	table := pgx.Identifier{schema, ledger.Table}.Sanitize()
	for name, c := range cycles {
		_, err := pool.Exec(ctx, "INSERT INTO "+table+" (task, cycle_start, plan, slot, keep_until) SELECT 't', $1, $2, s, CASE WHEN s = -1 THEN $3::timestamptz END FROM generate_series(-1, 2) s",
			c.start, c.plan, c.keep)
		require.NoError(t, err, name)
	}
	// Another task's rows are never touched.
	_, err := pool.Exec(ctx, "INSERT INTO "+table+" (task, cycle_start, plan, slot, keep_until) VALUES ('other', $1, 'p', -1, $2)", now.Add(-100*time.Hour), now.Add(-50*time.Hour))
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	n, err := led.Prune(ctx, tx, "t", now.Add(-10*time.Hour), now)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.EqualValues(t, 8, n, "two cycles of four rows each")

	for name, c := range cycles {
		got := riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+table+" WHERE task = 't' AND cycle_start = $1 AND plan = $2", c.start, c.plan)
		if c.kept {
			require.EqualValues(t, 4, got, "%s: kept with its slots", name)
		} else {
			require.Zero(t, got, "%s: pruned with its slots", name)
		}
	}
	require.EqualValues(t, 1, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+table+" WHERE task = 'other'"))
}

// TestTasksAndOtherSlots: Tasks lists each task once however many rows it
// has; OtherSlots returns the other cycles' slots recorded before the
// asking cycle (ties broken by plan and start), whose syncs can still run
// after notBefore, never the asking cycle itself.
func TestTasksAndOtherSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	led := ledger.New(schema)
	table := pgx.Identifier{schema, ledger.Table}.Sanitize()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	created := base.Add(-time.Hour)

	// Three plan ids in lexical order A < B < C.
	names := map[string]string{}
	for _, n := range []string{"A", "B", "C"} {
		names["120s/8/000000000000000"+strings.ToLower(n)] = n
	}
	insert := func(task, name string, start, createdAt, deadline time.Time, slots int) {
		t.Helper()
		plan := "120s/8/000000000000000" + strings.ToLower(name)
		_, err := pool.Exec(ctx, "INSERT INTO "+table+" (task, cycle_start, plan, slot, created_at, deadline, job_id, finished_at)"+
			" SELECT $1, $2, $3, s, $4, CASE WHEN s = -1 THEN $5::timestamptz END, 100 + s, CASE WHEN s >= 0 THEN $4::timestamptz END FROM generate_series(-1, $6 - 1) s",
			task, start, plan, createdAt, deadline, slots)
		require.NoError(t, err)
	}
	// The asking cycle: plan B at base, created at `created`.
	insert("t", "B", base, created, base.Add(2*time.Hour), 4)
	insert("t", "A", base, created.Add(-time.Minute), base.Add(time.Hour), 2)                         // older: listed
	insert("t", "A", base.Add(-48*time.Hour), created.Add(-48*time.Hour), base.Add(-47*time.Hour), 2) // its syncs long done: not listed
	insert("t", "C", base, created.Add(time.Minute), base.Add(time.Hour), 2)                          // newer: not listed
	insert("t", "A", base.Add(time.Minute), created, base.Add(time.Hour), 3)                          // same created_at, plan A < B: older, listed
	insert("t", "Z", base.Add(2*time.Minute), created, base.Add(time.Hour), 1)                        // same created_at, plan Z > B: newer, not listed
	insert("u", "A", base, created.Add(-time.Hour), base.Add(time.Hour), 1)                           // another task
	for i := range 50 {
		insert("t", "A", base.Add(-time.Duration(i+100)*time.Hour), created.Add(-100*time.Hour), base.Add(-90*time.Hour), 1)
	}

	tasks, err := led.Tasks(ctx, pool, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"t", "u"}, tasks)

	found, err := led.OtherSlots(ctx, pool, "t", "120s/8/000000000000000b", base, time.Time{}, base.Add(time.Hour), created, base.Add(-30*time.Minute))
	require.NoError(t, err)
	got := map[string]int{}
	for _, o := range found {
		require.True(t, o.Done)
		require.NoError(t, o.Cycle.Plan.Err(), "the row's plan id reads back as a plan")
		require.Equal(t, []any{2 * time.Minute, 8}, []any{o.Cycle.Plan.Cycle, o.Cycle.Plan.Slots})
		got[names[o.Cycle.Plan.String()]+"@"+o.Cycle.Start.Format("15:04")]++
	}
	require.Equal(t, map[string]int{"A@00:00": 2, "A@00:01": 3}, got)
}

// TestCommitOrder: cycles are ordered by when their bootstrap committed,
// not when its transaction began. Plan A's bootstrap of a cycle begins
// first and commits last; plan B's bootstraps the same cycle in between,
// and B's fan-out reads the ledger before A commits (it cannot see A).
// A's fan-out must then see B as recorded before it; ordered by created_at
// (the transaction's start) it did not, and each cycle missed the other.
func TestCommitOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	led := ledger.New(schema)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const planA, planB = "120s/8/000000000000000a", "120s/8/000000000000000b"

	record := func(tx pgx.Tx, plan string) {
		t.Helper()
		require.NoError(t, led.RecordCycle(ctx, tx, ledger.Cycle{Task: "t", Plan: riverslottest.Key(t, plan), Start: base, End: base.Add(2 * time.Minute),
			Deadline: base.Add(3 * time.Minute), KeepUntil: base.Add(time.Hour), Placement: "hash"}))
		_, err := led.ClaimSlots(ctx, tx, "t", plan, base, 2)
		require.NoError(t, err)
	}
	others := func(plan string) map[string]int {
		t.Helper()
		own, ok, err := led.CycleRecord(ctx, pool, "t", plan, base)
		require.NoError(t, err)
		require.True(t, ok)
		found, err := led.OtherSlots(ctx, pool, "t", plan, base, time.Time{}, base.Add(time.Hour), own.Recorded, base.Add(-time.Hour))
		require.NoError(t, err)
		out := map[string]int{}
		for _, o := range found {
			out[o.Cycle.Plan.String()]++
		}
		return out
	}

	txA, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txA.Rollback(ctx) //nolint:errcheck // no-op after commit
	claimed, err := led.ClaimBootstrap(ctx, txA, "t", planA, base, 1)
	require.NoError(t, err)
	require.True(t, claimed)

	txB, err := pool.Begin(ctx)
	require.NoError(t, err)
	claimed, err = led.ClaimBootstrap(ctx, txB, "t", planB, base, 2)
	require.NoError(t, err)
	require.True(t, claimed)
	record(txB, planB)
	require.NoError(t, txB.Commit(ctx))
	require.Empty(t, others(planB), "B's fan-out, before A commits: nothing recorded before B")

	record(txA, planA)
	require.NoError(t, txA.Commit(ctx))
	require.Equal(t, map[string]int{planB: 2}, others(planA), "A committed after B: B is recorded before it")
	require.Empty(t, others(planB), "B still first")
	var createdA, createdB time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT created_at FROM "+led.QualifiedTable()+" WHERE plan = $1 AND slot = -1), (SELECT created_at FROM "+led.QualifiedTable()+" WHERE plan = $2 AND slot = -1)",
		planA, planB).Scan(&createdA, &createdB))
	require.True(t, createdA.Before(createdB), "the case the test is about: A's transaction began first")

	// Two bootstraps recording at once: the second waits for the first's
	// commit before it takes its place.
	const planC, planD = "120s/8/000000000000000c", "120s/8/000000000000000d"
	txC, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txC.Rollback(ctx) //nolint:errcheck // no-op after commit
	_, err = led.ClaimBootstrap(ctx, txC, "t", planC, base, 3)
	require.NoError(t, err)
	record(txC, planC)
	txD, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txD.Rollback(ctx) //nolint:errcheck // no-op after commit
	var pidD int
	require.NoError(t, txD.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pidD))
	_, err = led.ClaimBootstrap(ctx, txD, "t", planD, base, 4)
	require.NoError(t, err)
	done := make(chan error, 1)
	keyD := riverslottest.Key(t, planD)
	go func() {
		done <- led.RecordCycle(ctx, txD, ledger.Cycle{Task: "t", Plan: keyD, Start: base, End: base.Add(2 * time.Minute),
			Deadline: base.Add(3 * time.Minute), KeepUntil: base.Add(time.Hour), Placement: "hash"})
	}()
	riverslottest.WaitFor(t, 10*time.Second, "D waiting for C's order lock", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted", pidD) == 1
	})
	require.NoError(t, txC.Commit(ctx))
	require.NoError(t, <-done)
	require.NoError(t, txD.Commit(ctx))
	recC, _, err := led.CycleRecord(ctx, pool, "t", planC, base)
	require.NoError(t, err)
	recD, _, err := led.CycleRecord(ctx, pool, "t", planD, base)
	require.NoError(t, err)
	require.True(t, recC.Recorded.Before(recD.Recorded), "C %s, D %s", recC.Recorded, recD.Recorded)
	require.Equal(t, map[string]int{planA: 2, planB: 2, planC: 2}, others(planD))
}

// TestMigrateVersion6: a ledger of version 5 lacks the commit order and
// the fan-out cursors; the DDL adds them, idempotently, and Current says
// so before and after.
func TestMigrateVersion6(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	led := ledger.New(schema)
	_, err := pool.Exec(ctx, "ALTER TABLE "+led.QualifiedTable()+" DROP COLUMN recorded_at, DROP COLUMN progress_at, DROP COLUMN cursor_pinned, DROP COLUMN cursor_bucket, DROP COLUMN cursor_id")
	require.NoError(t, err)
	current, err := led.Current(ctx, pool)
	require.NoError(t, err)
	require.False(t, current)
	for range 2 {
		for _, ddl := range ledger.DDL(schema) {
			_, err := pool.Exec(ctx, ddl)
			require.NoError(t, err)
		}
	}
	current, err = led.Current(ctx, pool)
	require.NoError(t, err)
	require.True(t, current)
}
