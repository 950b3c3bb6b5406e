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
