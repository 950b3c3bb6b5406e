package riverslot

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/taskspec"
)

// Status returns where the named task's current cycle (the one running
// now: the latest in riverslot's ledger that has started) and the one
// before it stand, with the earliest cycle prepared ahead of its start
// (TaskStatus.Prepared): a cycle bootstrapped early by EnqueueCycle, or by
// the trigger's lead, is shown beside the running cycle, not instead of it.
// Before the task's first cycle starts, the current cycle is the latest
// prepared. The cycle is found under any plan and shown under the plan its
// bootstrap recorded (CycleStatus.Plan), with the placement it recorded: a task OppositeOf
// another is found even by a tool that describes it alone, and a pinned
// cycle's accounts are expected in their pinned slots. Everything about
// the cycle comes from its ledger rows, read by key: what its bootstrap
// decided, each slot's state and fan-out figures, and how its sync jobs
// ended (counted there by the nodes that ran them, with a lateness
// histogram), so nothing is lost when River deletes finished jobs. River's
// job table is read only for what is still queued or running: the per-slot
// jobs of slots not finished (by id) and the cycle's unfinished sync jobs
// (through River's fetching index; slot scheduling keeps them few). The
// accounts expected per slot come from the ledger too: what each slot's
// fan-out of an earlier cycle counted in its bucket range; only the task's
// first cycle under its plan counts the accounts table (through the bucket
// index, at most once a minute). Those the cycle's pins move (one
// bucket-index lookup per pin) are counted at most once a minute per task
// and cycle.
func (s *Scheduler) Status(ctx context.Context, taskName string) (*TaskStatus, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	if !s.configured {
		return nil, errNoRiverSchema
	}
	now := time.Now()
	current, plan, prepared, err := s.runningCycle(ctx, spec, now)
	if err != nil {
		return nil, err
	}
	if spec, err = planSpec(spec, plan, current); err != nil {
		return nil, err
	}
	st, err := s.statusAt(ctx, spec, current, now)
	if err != nil {
		return nil, err
	}
	st.Prepared = prepared
	return st, nil
}

// runningCycle returns the start and plan of the task's cycle running at
// now, as the ledger records it (the latest started; before the first
// starts, the latest prepared), and the earliest cycle prepared after it
// (nil when none). An error wrapping ErrNoCycle when the ledger records no
// cycle of the task.
func (s *Scheduler) runningCycle(ctx context.Context, spec *taskspec.Spec, now time.Time) (time.Time, taskspec.PlanKey, *PreparedCycle, error) {
	led := s.ledger()
	start, plan, found, err := led.CycleAt(ctx, s.pool, spec.Name, spec.PlanID, now)
	if err != nil {
		return time.Time{}, taskspec.PlanKey{}, nil, err
	}
	if !found {
		// No cycle has started yet: the latest prepared, with none after it.
		if start, plan, found, err = led.LatestCycle(ctx, s.pool, spec.Name, spec.PlanID); err != nil {
			return time.Time{}, taskspec.PlanKey{}, nil, err
		}
		if !found {
			return time.Time{}, taskspec.PlanKey{}, nil, &noCycleError{msg: fmt.Sprintf("task %q has no cycle yet: riverslot's ledger records no bootstrapped cycle of the task, under any plan", spec.Name)}
		}
		return start, plan, nil, nil
	}
	nextStart, nextPlan, ahead, err := led.NextCycle(ctx, s.pool, spec.Name, spec.PlanID, now)
	if err != nil || !ahead {
		return start, plan, nil, err
	}
	next, err := planSpec(spec, nextPlan, nextStart)
	if err != nil {
		return time.Time{}, taskspec.PlanKey{}, nil, err
	}
	return start, plan, &PreparedCycle{CycleStart: nextStart, Plan: next.PlanID, Slots: next.Slots(nextStart)}, nil
}

// StatusAt is Status for the cycle starting at cycleStart, under the plan
// its jobs carry (the task's own when it has jobs under it or none at all).
func (s *Scheduler) StatusAt(ctx context.Context, taskName string, cycleStart time.Time) (*TaskStatus, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	if !s.configured {
		return nil, errNoRiverSchema
	}
	cycleStart = cycleStart.UTC()
	plan, ok, err := s.cyclePlanFromLedger(ctx, spec, cycleStart)
	if err != nil {
		return nil, err
	}
	if !ok {
		// No ledger row of the cycle: it must be a cycle start of the
		// task as configured (a cycle not bootstrapped yet).
		if start := spec.Schedule.Start(cycleStart); !start.Equal(cycleStart) {
			return nil, &noCycleError{msg: fmt.Sprintf("cycleStart %s is not a cycle start of task %q and the ledger records no cycle of the task starting then; the cycle containing it starts at %s",
				cycleStart.Format(time.RFC3339), taskName, start.UTC().Format(time.RFC3339))}
		}
		plan = spec.Key
	}
	if spec, err = planSpec(spec, plan, cycleStart); err != nil {
		return nil, err
	}
	return s.statusAt(ctx, spec, cycleStart, time.Now())
}

// StatusFromLedger is Status (StatusAt for a cycleStart that is not zero)
// that never counts the accounts table, so that its cost does not grow with
// the fleet: the accounts expected per slot are what each slot's fan-out of
// an earlier cycle counted, as riverslot's ledger records them, when it has
// every slot; else what the cycle's own fan-outs selected (a slot not
// fanned out yet expects what it selected in the cycle before), without
// the pins' moves. Unlike StatusAt, it answers only for a cycle the ledger
// records: an error wrapping ErrNoCycle otherwise. It is what a page or a
// health check polled often should call; the operator's page (package
// riverslotweb) calls it on every view.
func (s *Scheduler) StatusFromLedger(ctx context.Context, taskName string, cycleStart time.Time) (*TaskStatus, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	if !s.configured {
		return nil, errNoRiverSchema
	}
	var (
		plan     taskspec.PlanKey
		found    bool
		prepared *PreparedCycle
		now      = time.Now()
	)
	if cycleStart.IsZero() {
		if cycleStart, plan, prepared, err = s.runningCycle(ctx, spec, now); err != nil {
			return nil, err
		}
	} else {
		if plan, found, err = s.cyclePlanFromLedger(ctx, spec, cycleStart); err != nil {
			return nil, err
		}
		if !found {
			return nil, &noCycleError{msg: fmt.Sprintf("task %q has no ledger row with cycle start %s; Cycles (the page's /api/cycles) lists the cycles it has",
				spec.Name, cycleStart.UTC().Format(time.RFC3339))}
		}
	}
	cycleStart = cycleStart.UTC()
	if spec, err = planSpec(spec, plan, cycleStart); err != nil {
		return nil, err
	}
	counts, complete, err := s.ledger().RangeCounts(ctx, s.pool, spec.Name, spec.PlanID, spec.Slots(cycleStart), cycleStart)
	if err != nil {
		return nil, err
	}
	if !complete || spec.Monthly() { // a month's days are not the last month's
		counts = nil
	}
	st, err := s.statusOf(ctx, spec, cycleStart, counts, now)
	if err != nil {
		return nil, err
	}
	st.Prepared = prepared
	return st, nil
}

// planSpec returns the spec the task's cycle at cycleStart runs under when
// it was made for plan (taskspec.Spec.ForPlan, as the per-slot worker
// does), keeping the task's schedule when the plan has its cycle (a
// wall-clock schedule's DST days).
func planSpec(spec *taskspec.Spec, plan taskspec.PlanKey, cycleStart time.Time) (*taskspec.Spec, error) {
	other, err := spec.ForPlan(plan, cycleStart)
	if err != nil {
		return nil, fmt.Errorf("task %q: its cycle %s was made under plan %q, which this version cannot run: %w",
			spec.Name, cycleStart.Format(time.RFC3339), plan, err)
	}
	if other != spec && !other.Monthly() && !spec.Monthly() && other.Plan.Cycle == spec.Plan.Cycle && spec.Schedule.Start(cycleStart).Equal(cycleStart) {
		other.Schedule = spec.Schedule
	}
	return other, nil
}

// statusAt is statusOf with the accounts expected per slot counted (or,
// when the accounts database does not answer, taken from the fan-outs).
func (s *Scheduler) statusAt(ctx context.Context, spec *taskspec.Spec, cycleStart, now time.Time) (*TaskStatus, error) {
	counts, err := s.expectedCounts(ctx, spec, cycleStart)
	var unreachable error
	if err != nil {
		if !taskspec.Unreachable(err) {
			return nil, err
		}
		// The accounts database is down while River's is not: Status
		// still answers, expecting what the fan-outs selected.
		counts, unreachable = nil, err
	}
	st, err := s.statusOf(ctx, spec, cycleStart, counts, now)
	if err != nil {
		return nil, err
	}
	if unreachable != nil {
		for _, c := range []*CycleStatus{st.Current, st.Previous} {
			if c != nil && c.AccountsError == "" {
				c.AccountsError = accountsErrorText(unreachable)
			}
		}
	}
	return st, nil
}

// accountsErrorText says why a status expects what the fan-outs selected.
func accountsErrorText(err error) string {
	return "the accounts database did not answer (" + err.Error() + "): the accounts expected per slot are what the fan-outs selected"
}

// statusOf reads the cycle at cycleStart and the one before it, as they
// stand at now. counts are the accounts per hash slot; nil means the
// expected accounts come from the jobs alone (jobsExpected).
func (s *Scheduler) statusOf(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time, counts []int64, now time.Time) (*TaskStatus, error) {
	prevStart := cycleStart.Add(-spec.Plan.Cycle) // on a wall-clock schedule, the previous start of the grid
	if spec.Schedule.Location != nil {
		prevStart = spec.Schedule.Start(cycleStart.Add(-time.Nanosecond)).UTC()
	}
	prevCounts := counts
	if spec.Monthly() && counts != nil {
		// The last month has days of its own.
		var err error
		if prevCounts, err = s.hashCounts(ctx, spec, prevStart); err != nil {
			prevCounts = nil // expected from its jobs, as when the accounts database is down
		}
	}
	prev, err := s.cycleStatus(ctx, spec, prevStart, prevCounts, now)
	if err != nil {
		return nil, err
	}
	if prevCounts == nil {
		jobsExpected(prev, nil)
	}
	current, err := s.cycleStatus(ctx, spec, cycleStart, counts, now)
	if err != nil {
		return nil, err
	}
	if counts == nil {
		jobsExpected(current, prev)
	}
	if err := s.checkStarting(ctx, spec, current, now); err != nil {
		return nil, err
	}
	st := &TaskStatus{Task: spec.Name, Current: current}
	if st.Census, err = s.census(ctx, spec); err != nil {
		// The census lives next to the accounts: their database may be
		// down while River's is not. Status still answers.
		s.log().WarnContext(ctx, "riverslot: Status could not read the weight census", slog.String("task", spec.Name), slog.String("error", err.Error()))
		st.Census = nil
	}
	if st.Upstreams, err = s.upstreams(ctx, spec); err != nil {
		s.log().WarnContext(ctx, "riverslot: Status could not read the task's upstreams", slog.String("task", spec.Name), slog.String("error", err.Error()))
		st.Upstreams = nil
	}
	if prev.SlotsDone+prev.SlotsFailed > 0 || slices.ContainsFunc(prev.PerSlot, func(p SlotStatus) bool { return p.State != SlotMissing }) {
		st.Previous = prev
	}
	return st, nil
}

// jobsExpected sets the expected accounts of c's slots from what the jobs
// carry, without counting the accounts table: a slot whose fan-out ran
// expects what it selected (enqueued plus skipped as late), any other slot
// what the same slot selected in the previous cycle (prev, when its fan-out
// ran there; else 0). Pinned in and out are not counted; no slot is off.
func jobsExpected(c, prev *CycleStatus) {
	c.AccountsExpected = 0
	for i := range c.PerSlot {
		p := &c.PerSlot[i]
		p.Expected, p.PinnedIn, p.PinnedOut = 0, 0, 0
		switch {
		case p.State == SlotDone || p.Batches > 0:
			p.Expected = p.Enqueued + p.Skipped
		case prev != nil && i < len(prev.PerSlot):
			p.Expected = prev.PerSlot[i].Expected
		}
		c.AccountsExpected += p.Expected
	}
	if c.OffSlots > 0 {
		c.OffSlots, c.OffSlot = 0, -1
		if c.FailedSlot < 0 && c.BehindSlots == 0 {
			c.OnTrack, c.Verdict = true, "on track"
		}
	}
}

func (s *Scheduler) riverTable(*taskspec.Spec) string {
	return riverjob.QualifiedTable(s.riverSchema)
}
