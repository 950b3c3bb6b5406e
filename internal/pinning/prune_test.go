package pinning

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

// TestPrune computes the pins of several cycles of one task, two plans
// (16 s, the node's, and a 24 h one, as before a change of Cycle), gives
// some of them ledger rows (a cycle following the pins, a slot in various
// states), and prunes as a bootstrap of the current cycle, or of one far
// ahead (EnqueueCycle), would. River's job table is empty, as after its
// cleaner ran. Only the cycles no per-slot job can still read go: a cycle
// with a slot not finished (running, retryable or failed) keeps its pins
// whatever its plan's length, and so does the latest cycle of each plan.
func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, spec := weightedTask(t, heavy60)
	now := time.Now().UTC().Truncate(time.Second)
	day, err := slotplan.New(24 * time.Hour)
	require.NoError(t, err)
	long, err := spec.ForPlan(taskspec.KeyOf(day, spec.Seed, 0), now.Add(-5*time.Hour))
	require.NoError(t, err)
	led := pgx.Identifier{schema, "riverslot_ledger"}.Sanitize()

	type cycle struct {
		spec  *taskspec.Spec
		start time.Time
		state string // of its per-slot job, as the ledger records it; "" for none
		// legacy: the cycle's row predates recorded placements.
		legacy bool
		kept   bool
	}
	cycles := map[string]cycle{
		"no jobs, old":                  {spec: spec, start: now.Add(-6 * time.Hour)},
		"discarded job":                 {spec: spec, start: now.Add(-5 * time.Hour), state: "discarded", kept: true},
		"completed jobs":                {spec: spec, start: now.Add(-4 * time.Hour), state: "completed"},
		"legacy retryable job":          {spec: spec, start: now.Add(-4*time.Hour - 30*time.Minute), state: "retryable", legacy: true, kept: true},
		"within the hour kept":          {spec: spec, start: now.Add(-30 * time.Minute), state: "completed", kept: true},
		"current, latest of its plan":   {spec: spec, start: now, kept: true},
		"24 h plan, running job":        {spec: long, start: now.Add(-29 * time.Hour), state: "running", kept: true},
		"24 h plan, latest of its plan": {spec: long, start: now.Add(-5 * time.Hour), kept: true},
	}
	for name, c := range cycles {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		o, err := Place(ctx, tx, pool, c.spec, c.start)
		require.NoError(t, err, name)
		require.Positive(t, o.Pinned, name)
		require.NoError(t, tx.Commit(ctx))
		if c.state == "" {
			continue
		}
		// The cycle as its bootstrap records it in the ledger (River's
		// job table is not read: River may have deleted the jobs), and
		// its slot 0, finished when its per-slot job completed.
		var placement, ref any
		if !c.legacy {
			placement, ref = perslot.PlacementPinned, c.spec.PinsRef()
		}
		_, err = pool.Exec(ctx, "INSERT INTO "+led+" (task, cycle_start, plan, slot, placement, pins) VALUES ($1, $2, $3, -1, $4, $5)",
			c.spec.Name, c.start, c.spec.PlanID, placement, ref)
		require.NoError(t, err, name)
		_, err = pool.Exec(ctx, "INSERT INTO "+led+" (task, cycle_start, plan, slot, job_id, finished_at, failed_at) VALUES ($1, $2, $3, 0, 1,"+
			" CASE WHEN $4 = 'completed' THEN now() END, CASE WHEN $4 = 'discarded' THEN now() END)",
			c.spec.Name, c.start, c.spec.PlanID, c.state)
		require.NoError(t, err, name)
	}
	// River's job table holds none of these jobs: it is not what decides.
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()))

	// A bootstrap far ahead (EnqueueCycle) prunes as one of now would.
	for _, at := range []time.Time{now.Add(100 * spec.Plan.Cycle), now} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = Prune(ctx, tx, tx, spec, schema, at)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}

	pinCycles := pgx.Identifier{schema, taskspec.PinCyclesTable}.Sanitize()
	pins := pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()
	for name, c := range cycles {
		n := riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pinCycles+" WHERE plan = $1 AND cycle_start = $2", c.spec.PlanID, c.start)
		p := riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pins+" WHERE plan = $1 AND cycle_start = $2", c.spec.PlanID, c.start)
		if c.kept {
			require.EqualValues(t, 1, n, "%s: kept", name)
			require.Positive(t, p, "%s: its pins kept", name)
		} else {
			require.Zero(t, n, "%s: pruned", name)
			require.Zero(t, p, "%s: its pins pruned", name)
		}
	}
}
