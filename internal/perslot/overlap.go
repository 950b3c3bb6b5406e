package perslot

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/riverjob"
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
	month      *slotplan.Monthly // a calendar-month cycle's days (plan is then a bound only)
	seed       uint64
	shift      int
	cycleStart time.Time
	recorded   time.Time // its place in the task's commit order (ledger.Cycle.Recorded): older first
	planID     string
	// replayOnly: a regular neighbour of this job's cycle (same plan and
	// grid), whose syncs are a whole cycle away: it takes part in
	// replaying the older cycles' decisions, never in the final one.
	replayOnly bool
	slots      map[int]bool // the other cycle's slots whose fan-out finished, will run, or placed accounts before it stopped
	// stopped: the slots whose fan-out stopped for good before it
	// finished (its last attempt failed, or River cancelled, discarded or
	// deleted its job) after committing batches: where its last batch
	// left off. It placed the accounts up to there, none after.
	stopped map[int]stopAt
	// runs: when each slot's fan-out placed (or will place) its accounts,
	// from the ledger; with late, the other plan's late policy, it says
	// where a late account of the slot may have been spread. A slot
	// without a run (and an overlap without late) places every account
	// at its regular time.
	runs map[int]fanOut
	late *lateRules
	seen time.Time // when the overlaps were read: a pending fan-out runs after it
	// insertedAll: slots whose finished fan-out inserted every account it
	// selected (true) or none (false), as the ledger counts them: what
	// the slot did with an account is known, not replayed. A slot that
	// inserted some has no entry.
	insertedAll map[int]bool
	// pins is what the other cycle follows (nil: hash placement), and
	// pinned the slots (in the pins' own task) of the current page's
	// accounts pinned there.
	pins    *taskspec.PinsRef
	pinRead taskspec.PinRead
	pinned  map[uuid.UUID]int
}

// stopAt is the cursor a stopped fan-out's last committed batch left in
// the ledger: the last account it placed, in its order (the slot's bucket
// range by (bucket, id), then, with pinned, the accounts pinned to the
// slot by id).
type stopAt struct {
	pinned bool
	bucket int
	after  uuid.UUID
}

// placed reports whether the stopped fan-out had placed the account.
func (o *overlap) placed(at stopAt, id uuid.UUID) bool {
	if _, pinned := o.pinned[id]; o.pins != nil && pinned {
		// Pinned in that cycle: placed in the pinned phase, after the
		// range (the range phase skips every pinned account).
		return at.pinned && bytes.Compare(id[:], at.after[:]) <= 0
	}
	if at.pinned {
		return true // the range was done
	}
	b := o.plan.BucketOf(id)
	return b < at.bucket || b == at.bucket && bytes.Compare(id[:], at.after[:]) <= 0
}

// fanOut is when a slot's fan-out placed its accounts: its batches ran
// between from and to. A pending one (queued, or running with batches
// left) places them from the overlap's seen time on.
type fanOut struct {
	from, to time.Time
	pending  bool
	// spread and skipped: whether the fan-out recorded late accounts
	// spread, and late accounts skipped (both true when not recorded).
	spread, skipped bool
}

// clockSkew is the margin for the database's clock (the ledger's
// started_at and finished_at) against the nodes' (the placements).
const clockSkew = time.Second

// lateRules are the other cycle's late policy (as its bootstrap recorded
// it; as this node configures the task for a cycle recorded without one)
// and its end.
type lateRules struct {
	spec     *taskspec.Spec
	cycleEnd time.Time
	first    bool // the task's first cycle under FirstCycleAll
}

// span is when a cycle syncs an account: at lo (lo == hi), or, when its
// fan-out may have found the account late and spread it, at some time in
// [lo, hi] that the ledger does not record.
type span struct{ lo, hi time.Time }

// instant is the span of a sync known to run at t.
func instant(t time.Time) span { return span{t, t} }

// overlaps loads the other cycles that may sync this job's accounts within
// half a cycle of it, from the ledger: the cycles of the task, of any plan,
// recorded before this job's cycle, whose syncs can still run less than
// half a cycle before it starts (their recorded deadline), with each of
// their slots that fanned out, still will, or stopped for good after some batches (up to its recorded cursor). River's job table is read only
// for the slots the ledger records as not finished (is the job still
// queued or running?), by primary key: however early River deletes
// finished jobs, a finished fan-out stays in the ledger.
func (w *Worker) overlaps(ctx context.Context, client *river.Client[pgx.Tx], spec *taskspec.Spec, job *river.Job[Args], own *ledger.Cycle) ([]*overlap, error) {
	start := job.Args.CycleStart
	led := ledger.New(client.Schema())
	before := job.CreatedAt
	if own != nil {
		before = own.Recorded
	}
	// No lower bound on the other cycle's start: a 7-day cycle of an
	// earlier plan may still run. Its recorded deadline (the latest
	// NotAfter of its syncs) bounds what is read, and the ledger keeps only
	// the cycles of each plan's horizon.
	cycle := spec.CycleLen(start)
	found, err := led.OtherSlots(ctx, w.pool, spec.Name, spec.PlanID, start, time.Time{}, start.Add(cycle+cycle/2),
		before, start.Add(-cycle/2))
	if err != nil {
		return nil, fmt.Errorf("error looking up overlapping cycles: %w", err)
	}
	var pending []int64
	for _, r := range found {
		if !r.Done && !r.Failed && r.JobID != 0 {
			pending = append(pending, r.JobID)
		}
	}
	jobs, err := riverjob.ByID(ctx, w.pool, client.Schema(), pending)
	if err != nil {
		return nil, fmt.Errorf("error looking up overlapping cycles: %w", err)
	}
	byCycle := map[string]*overlap{}
	var out []*overlap
	seen := time.Now()
	for _, r := range found {
		c := r.Cycle
		// A regular neighbour (same plan, same grid): its syncs are a
		// whole cycle away, so it never keeps this cycle from an account;
		// it is kept for the replay only, where it may have kept a cycle
		// of another plan from one (a rollback: A, B, then A again).
		neighbour := c.Plan == spec.Key && sameGrid(spec, start, c.Start)
		var (
			stopped bool
			at      stopAt
		)
		if !r.Done {
			// A slot not finished syncs the rest of its accounts only
			// while its job can still run. One whose last attempt failed,
			// or that River deleted, cancelled or discarded, stopped for
			// good where its last committed batch left off: it synced the
			// accounts it placed before (its cursor in the ledger says
			// which), none after. Without a cursor it placed none.
			switch jobs[r.JobID].State {
			case "", "cancelled", "discarded":
				stopped = true
			}
			if r.Failed || r.JobID == 0 {
				stopped = true
			}
			if stopped {
				if r.Cursor == nil || r.Inserted == 0 {
					continue // it inserted no sync
				}
				after, err := uuid.Parse(r.Cursor.AfterID)
				if err != nil {
					continue // not a cursor this version wrote
				}
				at = stopAt{pinned: r.Cursor.Pinned, bucket: r.Cursor.Bucket, after: after}
			}
		}
		key := c.Plan.String() + "@" + c.Start.Format(time.RFC3339Nano)
		o, ok := byCycle[key]
		if !ok {
			other, err := spec.ForPlan(c.Plan, c.Start)
			if err != nil {
				continue // a plan this version cannot read: its own jobs are cancelled
			}
			other = other.WithLate(c.LatePolicy, c.LateGrace)
			pins, err := cyclePins(other, Args{Task: spec.Name, Placement: c.Placement, Pins: c.Pins})
			if err != nil {
				continue // its own jobs are cancelled
			}
			end := c.End
			if end.IsZero() {
				end = other.CycleEnd(c.Start)
			}
			o = &overlap{plan: other.Plan, month: other.Month, seed: other.Seed, shift: other.Shift, cycleStart: c.Start, recorded: c.Recorded, planID: c.Plan.String(),
				replayOnly: neighbour, slots: map[int]bool{}, stopped: map[int]stopAt{}, pins: pins,
				runs: map[int]fanOut{}, insertedAll: map[int]bool{}, late: &lateRules{spec: other, cycleEnd: end, first: c.First}, seen: seen}
			if pins != nil {
				o.pinRead = spec.PinRead(pins.Schema)
			}
			byCycle[key] = o
			out = append(out, o)
		}
		o.slots[r.Slot] = true
		switch {
		case stopped:
			// Its batches ran between its start and its last commit.
			o.stopped[r.Slot] = at
			if !r.StartedAt.IsZero() && !r.ProgressAt.IsZero() {
				o.runs[r.Slot] = fanOut{from: r.StartedAt.Add(-clockSkew), to: r.ProgressAt.Add(clockSkew),
					spread: r.LateSpread != 0, skipped: r.LateSkipped != 0}
			}
		case r.Done && !r.StartedAt.IsZero() && !r.FinishedAt.IsZero():
			o.runs[r.Slot] = fanOut{from: r.StartedAt.Add(-clockSkew), to: r.FinishedAt.Add(clockSkew),
				spread: r.LateSpread != 0, skipped: r.LateSkipped != 0}
		case !r.Done:
			// Batches it committed placed their accounts from its start;
			// the rest are placed from now on.
			from := seen
			if !r.StartedAt.IsZero() {
				from = r.StartedAt.Add(-clockSkew)
			}
			o.runs[r.Slot] = fanOut{from: from, pending: true, spread: true, skipped: true}
		}
		if (r.Done || stopped) && r.Accounts >= 0 && r.Inserted >= 0 {
			// A stopped fan-out's counts are those of the accounts it
			// placed.
			switch r.Inserted {
			case 0:
				o.insertedAll[r.Slot] = false
			case r.Accounts:
				o.insertedAll[r.Slot] = true
			}
		}
	}
	// Oldest first: syncedByOlderCycle replays their decisions in order.
	slices.SortStableFunc(out, func(a, b *overlap) int {
		return cmp.Or(a.recorded.Compare(b.recorded), cmp.Compare(a.planID, b.planID), a.cycleStart.Compare(b.cycleStart))
	})
	return out, nil
}

// sameGrid reports whether two cycle starts of spec's plan lie on one grid:
// a whole number of cycles apart, or both starts of the task's schedule (a
// wall-clock schedule's cycles are 23 or 25 h long across DST changes).
func sameGrid(spec *taskspec.Spec, a, b time.Time) bool {
	if spec.Monthly() {
		return spec.Schedule.Start(a).Equal(a) && spec.Schedule.Start(b).Equal(b)
	}
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
// job is not cancelled or discarded, or stopped for good after it placed
// the account, and its late policy did not skip it).
// An account its fan-out found late was spread from the time of the batch
// that placed it, which the ledger bounds by the slot's start and finish:
// the span covers every time the spread may have chosen. (Judged at the
// regular time alone, a cycle whose fan-out ran late, after a deploy or
// an outage, let the next plan's cycle sync the account again seconds
// after the late sync.)
func (o *overlap) target(id uuid.UUID) (span, bool) {
	slot := o.slotOf(id)
	if !o.slots[slot] {
		return span{}, false
	}
	if at, ok := o.stopped[slot]; ok && !o.placed(at, id) {
		return span{}, false // its fan-out stopped for good before it
	}
	if all, ok := o.insertedAll[slot]; ok && !all {
		return span{}, false // its fan-out inserted none of the slot's accounts
	}
	slotStart, slotLen, cycleLen := o.plan.SlotStart(o.cycleStart, slot), o.plan.SlotDuration, o.plan.Cycle
	regular := slotStart.Add(o.plan.Offset(o.seed, id))
	if o.month != nil {
		slotStart, regular = o.month.DayStart(o.cycleStart, slot), o.month.Target(o.cycleStart, o.seed, id)
		slotLen, cycleLen = o.month.DayStart(o.cycleStart, slot+1).Sub(slotStart), o.cycleLen()
	}
	run, ok := o.runs[slot]
	if !ok || o.late == nil {
		return instant(regular), true
	}
	spec := o.late.spec
	lateAfter := regular.Add(spec.LateGrace)
	if run.pending && lateAfter.After(o.seen) || !run.pending && !lateAfter.Before(run.to) {
		return instant(regular), true // placed on time whenever its batch ran (or will run, on time)
	}
	surelyLate := lateAfter.Before(run.from)
	deadline := spec.LateDeadline(o.cycleStart, o.late.cycleEnd, slotStart)
	if o.late.first {
		deadline = o.late.cycleEnd
	}
	if spec.Opposed {
		if end := slotStart.Add(slotLen); end.Before(deadline) {
			deadline = end
		}
	}
	if !run.spread {
		// The fan-out recorded no late account spread (its own late
		// policy, whatever this node's): a late account was skipped.
		if surelyLate && run.skipped {
			return span{}, false
		}
		return instant(regular), true // on time, or skipped
	}
	// A finished fan-out that recorded spread accounts spread them,
	// whatever this node's late policy; a pending one follows it.
	if (run.pending && spec.LatePolicy == taskspec.LatePolicySkip && !o.late.first) || !run.from.Before(deadline) {
		if surelyLate {
			return span{}, false // skipped until the next cycle
		}
		return instant(regular), true // on time, or skipped
	}
	hi := deadline
	if !run.pending && !o.late.first {
		if last := run.to.Add(taskspec.CatchUpWindow(run.to, slotStart, slotLen, cycleLen)); last.Before(hi) {
			hi = last
		}
	}
	lo := regular
	if surelyLate {
		lo = run.from
	}
	return span{lo, hi}, true
}

// cycleLen is the other cycle's length: its plan's Cycle, or its month's.
func (o *overlap) cycleLen() time.Duration {
	if o.month != nil {
		return o.month.NextMonth(o.cycleStart).Sub(o.cycleStart)
	}
	return o.plan.Cycle
}

// slotOf returns the account's slot in the other cycle: its pinned slot
// there, else its hash slot.
func (o *overlap) slotOf(id uuid.UUID) int {
	if o.month != nil {
		return o.month.DayOf(o.cycleStart, o.seed, id)
	}
	if o.pins != nil {
		if pinned, ok := o.pinned[id]; ok && pinned >= 0 && pinned < o.plan.Slots {
			return o.plan.Shift(pinned, o.pins.Shift)
		}
	}
	return o.plan.Shift(o.plan.SlotOf(id), o.shift)
}

// syncedByOlderCycle reports whether another cycle, bootstrapped earlier,
// may sync the account inside this cycle ([cycleStart, cycleStart +
// cycle)) or less than half a cycle from target. That cycle runs under its
// own plan and placement; this one leaves the account to it, so across a
// plan change, a grid change or a rolling deploy no account is synced
// twice within a cycle, nor twice less than half a cycle apart.
//
// What an older cycle did with the account is read from the ledger where
// it is known (its slot inserted every account it selected, or none);
// otherwise its decision is replayed, oldest first (overlaps is in that
// order): a cycle that surely left the account to a cycle older than it
// does not sync it, and so does not keep this one from it. After
// a plan change and a rollback (plan A, then B, then A again), B's cycle
// that left an account to A's first cycle does not make A's next cycle
// skip it.
func syncedByOlderCycle(overlaps []*overlap, id uuid.UUID, target, cycleStart time.Time, cycle time.Duration) bool {
	var synced, others []span // the older cycles' syncs of the account; those of other plans or grids
	for _, o := range overlaps {
		old, ok := o.target(id)
		if !ok {
			continue // it does not sync the account
		}
		// A slot that inserted every account synced this one, whatever a
		// replay from the cycles still in view would say.
		if !o.insertedAll[o.slotOf(id)] && surelyCovered(synced, old, o.cycleStart, o.cycleLen()) {
			continue // it left the account to an older cycle
		}
		synced = append(synced, old)
		if !o.replayOnly {
			others = append(others, old)
		}
	}
	return covered(others, instant(target), cycleStart, cycle)
}

// covered reports whether one of synced may fall inside the cycle
// [cycleStart, cycleStart + cycle) or less than half a cycle from target:
// the rule by which a cycle leaves an account to an older one.
func covered(synced []span, target span, cycleStart time.Time, cycle time.Duration) bool {
	end := cycleStart.Add(cycle)
	for _, old := range synced {
		if target.lo.Sub(old.hi) < cycle/2 && old.lo.Sub(target.hi) < cycle/2 {
			return true
		}
		// A spread sync lands before its span's end (the late deadline):
		// a span ending at this cycle's start lies before it.
		if (old.hi.After(cycleStart) || old.lo.Equal(cycleStart)) && old.lo.Before(end) {
			return true
		}
	}
	return false
}

// surelyCovered is covered for every time in the spans: what an older
// cycle's fan-out decided, replayed, when it left the account to a cycle
// before it. Where the ledger cannot tell, the older cycle is taken to
// sync the account, which keeps this cycle from it.
func surelyCovered(synced []span, target span, cycleStart time.Time, cycle time.Duration) bool {
	end := cycleStart.Add(cycle)
	for _, old := range synced {
		if target.hi.Sub(old.lo) < cycle/2 && old.hi.Sub(target.lo) < cycle/2 {
			return true
		}
		if !old.lo.Before(cycleStart) && old.hi.Before(end) {
			return true
		}
	}
	return false
}
