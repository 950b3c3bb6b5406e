package perslot

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// overlap is a cycle of the same task made for another plan, bootstrapped
// before this job's cycle, whose syncs may fall near this cycle's: after a
// change of Cycle or Seed, or while the nodes of a rolling deploy disagree.
type overlap struct {
	plan       slotplan.Plan
	seed       uint64
	shift      int
	cycleStart time.Time
	slots      map[int]bool // the other cycle's slots whose per-slot job is not cancelled or discarded
}

// overlapsSQL selects the per-slot jobs of other plans of the same task,
// inserted before this job, of cycles that started at most two days before
// this one (River keeps completed jobs about that long; see
// riverutil.Scheduler.Configure).
const overlapsSQL = `SELECT args->>'plan', (args->>'cycle_start')::timestamptz, (args->>'slot')::int
	FROM %s
	WHERE kind = $1 AND args->>'task' = $2 AND coalesce(args->>'plan', '') NOT IN ('', $3)
	  AND state NOT IN ('cancelled', 'discarded') AND created_at < $4
	  AND (args->>'cycle_start')::timestamptz > $5 AND (args->>'cycle_start')::timestamptz < $6`

// overlaps loads the other plans' cycles that may sync this job's accounts
// within half a cycle of it.
func (w *Worker) overlaps(ctx context.Context, client *river.Client[pgx.Tx], spec *taskspec.Spec, job *river.Job[Args]) ([]overlap, error) {
	start := job.Args.CycleStart
	rows, err := w.pool.Query(ctx, fmt.Sprintf(overlapsSQL, sqlbucket.QualifiedTable(client.Schema(), "river_job")),
		Kind, spec.Name, spec.PlanID, job.CreatedAt, start.Add(-48*time.Hour), start.Add(spec.Plan.Cycle+spec.Plan.Cycle/2))
	if err != nil {
		return nil, fmt.Errorf("error looking up cycles of other plans: %w", err)
	}
	type row struct {
		Plan       string
		CycleStart time.Time
		Slot       int
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, fmt.Errorf("error looking up cycles of other plans: %w", err)
	}
	byCycle := map[string]*overlap{}
	var out []overlap
	for _, r := range found {
		key := r.Plan + "@" + r.CycleStart.UTC().Format(time.RFC3339Nano)
		o, ok := byCycle[key]
		if !ok {
			other, err := spec.ForPlan(r.Plan, r.CycleStart)
			if err != nil {
				continue // a plan this version cannot read: its own jobs are cancelled
			}
			o = &overlap{plan: other.Plan, seed: other.Seed, shift: other.Shift, cycleStart: r.CycleStart, slots: map[int]bool{}}
			byCycle[key] = o
		}
		o.slots[r.Slot] = true
	}
	for _, o := range byCycle {
		out = append(out, *o)
	}
	return out, nil
}

// syncedByOlderPlan reports whether a cycle of another plan, bootstrapped
// earlier, syncs the account inside this cycle ([cycleStart, cycleStart +
// cycle)) or less than half a cycle from target. That cycle runs under its
// own plan; this one leaves the account to it, so across a plan change no
// account is synced twice within a cycle, nor twice less than half a cycle
// apart: it is synced by the old cycle and skips the overlapping new one.
func syncedByOlderPlan(overlaps []overlap, id uuid.UUID, target, cycleStart time.Time, cycle time.Duration) bool {
	for _, o := range overlaps {
		if !o.slots[o.plan.Shift(o.plan.SlotOf(id), o.shift)] {
			continue
		}
		old := o.plan.ShiftedTarget(o.cycleStart, o.seed, id, o.shift)
		if d := target.Sub(old); d < cycle/2 && d > -cycle/2 {
			return true
		}
		if !old.Before(cycleStart) && old.Before(cycleStart.Add(cycle)) {
			return true
		}
	}
	return false
}
