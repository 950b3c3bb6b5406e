package perslot

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// overlap is another cycle of the same task, bootstrapped before this
// job's cycle, whose syncs may fall near this cycle's: a cycle of another
// plan (a change of Cycle or Seed, or nodes of a rolling deploy that
// disagree) or of the same plan on another grid (a TriggerOffset change, a
// cycle started by riverslot demo or EnqueueCycle off the node's grid).
// Regular neighbours on the same grid are kept for the replay only: their
// syncs are a whole cycle away.
type overlap struct {
	plan       slotplan.Plan
	seed       uint64
	shift      int
	cycleStart time.Time
	createdAt  time.Time // when its bootstrap recorded it: older first
	planID     string
	// replayOnly: a regular neighbour of this job's cycle (same plan and
	// grid), whose syncs are a whole cycle away: it takes part in
	// replaying the older cycles' decisions, never in the final one.
	replayOnly bool
	slots      map[int]bool // the other cycle's slots whose per-slot job is not cancelled or discarded
	// pins is what the other cycle follows (nil: hash placement), and
	// pinned the slots (in the pins' own task) of the current page's
	// accounts pinned there.
	pins    *taskspec.PinsRef
	pinRead taskspec.PinRead
	pinned  map[uuid.UUID]int
}

// overlaps loads the other cycles that may sync this job's accounts within
// half a cycle of it, from the ledger: the cycles of the task, of any plan,
// recorded before this job's cycle, whose syncs can still run less than
// half a cycle before it starts (their recorded deadline), with each of
// their slots that fanned out or still will. River's job table is read only
// for the slots the ledger records as not finished (is the job still
// queued or running?), by primary key: however early River deletes
// finished jobs, a finished fan-out stays in the ledger.
func (w *Worker) overlaps(ctx context.Context, client *river.Client[pgx.Tx], spec *taskspec.Spec, job *river.Job[Args], own *ledger.Cycle) ([]*overlap, error) {
	start := job.Args.CycleStart
	led := ledger.New(client.Schema())
	before := job.CreatedAt
	if own != nil {
		before = own.CreatedAt
	}
	// No lower bound on the other cycle's start: a 7-day cycle of an
	// earlier plan may still run. Its recorded deadline (the latest
	// NotAfter of its syncs) bounds what is read, and the ledger keeps only
	// the cycles of each plan's horizon.
	found, err := led.OtherSlots(ctx, w.pool, spec.Name, spec.PlanID, start, time.Time{}, start.Add(spec.Plan.Cycle+spec.Plan.Cycle/2),
		before, start.Add(-spec.Plan.Cycle/2))
	if err != nil {
		return nil, fmt.Errorf("error looking up overlapping cycles: %w", err)
	}
	var pending []int64
	for _, r := range found {
		if !r.Done && !r.Failed && r.JobID != 0 {
			pending = append(pending, r.JobID)
		}
	}
	states, err := led.JobStates(ctx, w.pool, pending)
	if err != nil {
		return nil, fmt.Errorf("error looking up overlapping cycles: %w", err)
	}
	byCycle := map[string]*overlap{}
	var out []*overlap
	for _, r := range found {
		c := r.Cycle
		// A regular neighbour (same plan, same grid): its syncs are a
		// whole cycle away, so it never keeps this cycle from an account;
		// it is kept for the replay only, where it may have kept a cycle
		// of another plan from one (a rollback: A, B, then A again).
		neighbour := c.Plan == spec.Key && sameGrid(spec, start, c.Start)
		if !r.Done {
			// A slot not finished syncs its accounts only while its job
			// can still run: one River deleted, cancelled or discarded
			// without finishing does not.
			switch states[r.JobID] {
			case "", "cancelled", "discarded":
				continue
			}
			if r.Failed || r.JobID == 0 {
				continue
			}
		}
		key := c.Plan.String() + "@" + c.Start.Format(time.RFC3339Nano)
		o, ok := byCycle[key]
		if !ok {
			other, err := spec.ForPlan(c.Plan, c.Start)
			if err != nil {
				continue // a plan this version cannot read: its own jobs are cancelled
			}
			pins, err := cyclePins(other, Args{Task: spec.Name, Placement: c.Placement, Pins: c.Pins})
			if err != nil {
				continue // its own jobs are cancelled
			}
			o = &overlap{plan: other.Plan, seed: other.Seed, shift: other.Shift, cycleStart: c.Start, createdAt: c.CreatedAt, planID: c.Plan.String(),
				replayOnly: neighbour, slots: map[int]bool{}, pins: pins}
			if pins != nil {
				o.pinRead = spec.PinRead(pins.Schema)
			}
			byCycle[key] = o
			out = append(out, o)
		}
		o.slots[r.Slot] = true
	}
	// Oldest first: syncedByOlderCycle replays their decisions in order.
	slices.SortStableFunc(out, func(a, b *overlap) int {
		return cmp.Or(a.createdAt.Compare(b.createdAt), cmp.Compare(a.planID, b.planID), a.cycleStart.Compare(b.cycleStart))
	})
	return out, nil
}

// sameGrid reports whether two cycle starts of spec's plan lie on one grid:
// a whole number of cycles apart, or both starts of the task's schedule (a
// wall-clock schedule's cycles are 23 or 25 h long across DST changes).
func sameGrid(spec *taskspec.Spec, a, b time.Time) bool {
	if a.Sub(b)%spec.Plan.Cycle == 0 {
		return true
	}
	return spec.Schedule.Start(a).Equal(a) && spec.Schedule.Start(b).Equal(b)
}

// loadOverlapPins reads, for every overlapping cycle that follows pins, the
// pinned slots of page's accounts there: one primary-key lookup per page
// and cycle, bounded by the page.
func (b *batch) loadOverlapPins(ctx context.Context, q querier, page []account) error {
	var ids []uuid.UUID
	for _, o := range b.overlaps {
		if o.pins == nil {
			continue
		}
		if ids == nil {
			ids = make([]uuid.UUID, len(page))
			for i, a := range page {
				ids[i] = a.ID
			}
		}
		rows, err := q.Query(ctx, o.pinRead.Slots, o.pins.Task, o.pins.Plan, o.pins.PinsCycle(o.cycleStart), ids)
		if err != nil {
			return fmt.Errorf("error reading the pins of the overlapping cycle %s: %w", o.cycleStart.UTC().Format(time.RFC3339), err)
		}
		o.pinned = make(map[uuid.UUID]int)
		var (
			id   uuid.UUID
			slot int
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &slot}, func() error {
			o.pinned[id] = slot
			return nil
		}); err != nil {
			return fmt.Errorf("error reading the pins of the overlapping cycle %s: %w", o.cycleStart.UTC().Format(time.RFC3339), err)
		}
	}
	return nil
}

// target returns when the other cycle syncs the account, by its real
// placement (pinned or hash slot), and whether it does (its slot's per-slot
// job is not cancelled or discarded).
func (o *overlap) target(id uuid.UUID) (time.Time, bool) {
	slot := o.plan.Shift(o.plan.SlotOf(id), o.shift)
	if o.pins != nil {
		if pinned, ok := o.pinned[id]; ok && pinned >= 0 && pinned < o.plan.Slots {
			slot = o.plan.Shift(pinned, o.pins.Shift)
		}
	}
	if !o.slots[slot] {
		return time.Time{}, false
	}
	return o.plan.SlotStart(o.cycleStart, slot).Add(o.plan.Offset(o.seed, id)), true
}

// syncedByOlderCycle reports whether another cycle, bootstrapped earlier,
// syncs the account inside this cycle ([cycleStart, cycleStart + cycle)) or
// less than half a cycle from target. That cycle runs under its own plan and
// placement; this one leaves the account to it, so across a plan change, a
// grid change or a rolling deploy no account is synced twice within a
// cycle, nor twice less than half a cycle apart by their targets.
//
// The older cycles' own decisions are replayed, oldest first (overlaps is
// in that order): a cycle that left the account to a cycle older than it
// does not sync it, and so does not keep this one from it. After a plan
// change and a rollback (plan A, then B, then A again), B's cycle that
// left an account to A's first cycle does not make A's next cycle skip it.
func syncedByOlderCycle(overlaps []*overlap, id uuid.UUID, target, cycleStart time.Time, cycle time.Duration) bool {
	var synced, others []time.Time // the older cycles' syncs of the account; those of other plans or grids
	for _, o := range overlaps {
		old, ok := o.target(id)
		if !ok || covered(synced, old, o.cycleStart, o.plan.Cycle) {
			continue // it does not sync the account, or left it to an older cycle
		}
		synced = append(synced, old)
		if !o.replayOnly {
			others = append(others, old)
		}
	}
	return covered(others, target, cycleStart, cycle)
}

// covered reports whether one of synced falls inside the cycle
// [cycleStart, cycleStart + cycle) or less than half a cycle from target:
// the rule by which a cycle leaves an account to an older one.
func covered(synced []time.Time, target, cycleStart time.Time, cycle time.Duration) bool {
	for _, old := range synced {
		if d := target.Sub(old); d < cycle/2 && d > -cycle/2 {
			return true
		}
		if !old.Before(cycleStart) && old.Before(cycleStart.Add(cycle)) {
			return true
		}
	}
	return false
}
