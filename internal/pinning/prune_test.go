package pinning

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/slotplan"
)

// TestPrune computes the pins of several cycles of one task, two plans
// (16 s, the node's, and a 24 h one, as before a change of Cycle), gives
// some of them per-slot jobs in various states, and prunes as a bootstrap
// of the current cycle, or of one far ahead (EnqueueCycle), would. Only the
// cycles no per-slot job can still read go: a cycle with a running,
// retryable or discarded per-slot job keeps its pins whatever its plan's
// length, and so does the latest cycle of each plan.
func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, spec := weightedTask(t, heavy60)
	now := time.Now().UTC().Truncate(time.Second)
	day, err := slotplan.New(24 * time.Hour)
	require.NoError(t, err)
	long, err := spec.ForPlan(taskspec.PlanID(day, spec.Seed, 0), now.Add(-5*time.Hour))
	require.NoError(t, err)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()

	type cycle struct {
		spec  *taskspec.Spec
		start time.Time
		state string // of its per-slot job; "" for none
		// legacy: the per-slot job predates recorded placements.
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
		args := any(perslot.NewArgs(c.spec, c.start, 0))
		if c.legacy {
			args = map[string]any{"task": c.spec.Name, "cycle_start": c.start, "slot": 0, "plan": c.spec.PlanID}
		}
		data, err := json.Marshal(args)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+jobs+" (kind, args, state, queue, priority, max_attempts, attempt, scheduled_at, attempted_at, finalized_at)"+
			" VALUES ($1, $2, $3::text::"+pgx.Identifier{schema, "river_job_state"}.Sanitize()+", 'default', 1, 5, 1, now(), now(), CASE WHEN $3::text IN ('completed', 'discarded', 'cancelled') THEN now() END)",
			perslot.Kind, data, c.state)
		require.NoError(t, err, name)
	}

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
