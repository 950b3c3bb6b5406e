package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestCycleAtAndNextCycle: CycleAt finds the cycle running at a time (the
// latest bootstrapped that has started), never one prepared ahead of its
// start, which NextCycle finds (the earliest after the time) and
// LatestCycle still returns; planFirst breaks a tie of two plans at one
// start; slot rows and other tasks are never a cycle; no ledger is none.
func TestCycleAtAndNextCycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	led := ledger.New(schema)
	table := pgx.Identifier{schema, ledger.Table}.Sanitize()
	now := time.Now().UTC().Truncate(time.Second)
	const a, b = "3600s/16/1", "3600s/16/2"
	past, running, ahead, later := now.Add(-70*time.Minute), now.Add(-10*time.Minute), now.Add(50*time.Minute), now.Add(110*time.Minute)
	for _, row := range []struct {
		task  string
		start time.Time
		plan  string
		slot  int
	}{
		{"t", past, a, -1}, {"t", running, a, -1}, {"t", running, b, -1}, {"t", ahead, a, -1}, {"t", later, b, -1},
		{"t", now.Add(-time.Minute), a, 3}, // a slot's row, no cycle of its own
		{"other", now.Add(-time.Second), a, -1},
	} {
		_, err := pool.Exec(ctx, "INSERT INTO "+table+" (task, cycle_start, plan, slot) VALUES ($1, $2, $3, $4)", row.task, row.start, row.plan, row.slot)
		require.NoError(t, err)
	}

	type found struct {
		start time.Time
		plan  string
		ok    bool
	}
	got := func(start time.Time, plan taskspec.PlanKey, ok bool, err error) found {
		t.Helper()
		require.NoError(t, err)
		return found{start, plan.String(), ok}
	}
	require.Equal(t, found{running, a, true}, got(led.CycleAt(ctx, pool, "t", a, now)), "the running cycle, not the one prepared ahead")
	require.Equal(t, found{running, b, true}, got(led.CycleAt(ctx, pool, "t", b, now)), "planFirst first of two at one start")
	require.Equal(t, found{running, a, true}, got(led.CycleAt(ctx, pool, "t", a, running)), "a cycle runs from its start")
	require.Equal(t, found{past, a, true}, got(led.CycleAt(ctx, pool, "t", a, running.Add(-time.Nanosecond))))
	require.Equal(t, found{ahead, a, true}, got(led.CycleAt(ctx, pool, "t", a, ahead.Add(time.Second))), "once it starts")
	require.False(t, got(led.CycleAt(ctx, pool, "t", a, past.Add(-time.Second))).ok, "none started yet")

	require.Equal(t, found{ahead, a, true}, got(led.NextCycle(ctx, pool, "t", a, now)), "the earliest prepared ahead")
	require.Equal(t, found{later, b, true}, got(led.NextCycle(ctx, pool, "t", a, ahead)), "after, not at")
	require.False(t, got(led.NextCycle(ctx, pool, "t", a, later)).ok)
	require.Equal(t, found{later, b, true}, got(led.LatestCycle(ctx, pool, "t", a)), "the latest bootstrapped, prepared or not")

	missing := ledger.New(riverslottest.EmptySchema(ctx, t, pool))
	require.False(t, got(missing.CycleAt(ctx, pool, "t", a, now)).ok, "no ledger table: no cycle, no error")
	require.False(t, got(missing.NextCycle(ctx, pool, "t", a, now)).ok)
}
