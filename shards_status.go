package riverslot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ShardsStatus is one cycle of a sharded task over all its shards: each
// shard's Status of the cycle, and the totals.
type ShardsStatus struct {
	Task string
	// CycleStart is the fleet's cycle running now: the latest any shard
	// has made that has started, as Status chooses a database's (a cycle
	// prepared ahead of its start, by EnqueueCycle or the trigger's lead,
	// does not hide it). Before the fleet's first cycle starts, the latest
	// any shard has prepared.
	CycleStart time.Time
	Shards     []ShardCycle
	// Totals over the shards that answered, for CycleStart: the slots
	// they serve (each counted once, even one that several shards claim)
	// and their counts.
	Slots, SlotsDone, SlotsFailed, BehindSlots int
	AccountsExpected, Enqueued, Synced         int64
	Gone, SkippedStale, SkippedUpstream        int64
	Pending, Running                           int64
	// Unreachable counts the shards whose database did not answer: they
	// stop only their own accounts (see ShardCycle.Error).
	Unreachable int
	// Conflicts are the cycle's slots more than one shard serves, and
	// Unserved those no shard serves though every shard answered: the
	// shards followed different maps (a change made on some shards only,
	// see SetShardMap), or a shard has none. MapVersions are the map
	// versions the answering shards' cycles followed, when they differ (0:
	// a shard with no map).
	Conflicts, Unserved []int
	MapVersions         []int64
	// OnTrack: every shard answered and is on track, and every slot is
	// served by exactly one. Starting: not on track only because shards
	// are in their StartingGrace after a restart (CycleStatus.Starting).
	OnTrack, Starting bool
	Verdict           string
}

// ShardCycle is one shard's part of a ShardsStatus.
type ShardCycle struct {
	Shard  string
	Status *CycleStatus // nil when Error is set
	Error  string       // why the shard's database did not answer
}

// StatusShards returns the task's cycle running now over its shards, one
// Scheduler per shard (each with its Config.Shard, configured with its
// River client's config): the latest cycle start any of them has made that
// has started (ShardsStatus.CycleStart), each shard's Status of that cycle,
// and the totals; the verdict, and OnTrack, are that cycle's. The shards
// are asked at once, so a slow one costs no more than its own wait. A shard that
// does not answer is reported in its ShardCycle and left out of the
// totals: the others' cycles go on without it.
func StatusShards(ctx context.Context, task string, shards ...*Scheduler) (*ShardsStatus, error) {
	return StatusShardsWithOpts(ctx, task, nil, shards...)
}

// StatusShardsOpts are the options of StatusShardsWithOpts. A nil or zero
// StatusShardsOpts is StatusShards.
type StatusShardsOpts struct {
	// DescribeError says what a shard's ShardCycle.Error, the verdict and
	// the error returned tell of the error of a shard whose database did
	// not answer. Defaults to the error's own text; a page open to more
	// people than the databases are gives a request id instead, and logs
	// the error under it.
	DescribeError func(error) string

	// FromLedger reads each shard's cycle with StatusFromLedger, which never
	// counts the accounts tables, instead of StatusAt: for a page or a
	// health check polled often. A shard that has not made the fleet's
	// cycle yet (its trigger a moment later, or a restart) is still
	// read with StatusAt: the cycle as it stands there. Defaults to false.
	FromLedger bool
}

// StatusShardsWithOpts is StatusShards with opts.
func StatusShardsWithOpts(ctx context.Context, task string, opts *StatusShardsOpts, shards ...*Scheduler) (*ShardsStatus, error) {
	if opts == nil {
		opts = &StatusShardsOpts{}
	}
	describe := opts.DescribeError
	if describe == nil {
		describe = error.Error
	}
	status := func(ctx context.Context, s *Scheduler, at time.Time) (*TaskStatus, error) {
		return s.StatusAt(ctx, task, at)
	}
	if opts.FromLedger {
		status = func(ctx context.Context, s *Scheduler, at time.Time) (*TaskStatus, error) {
			st, err := s.StatusFromLedger(ctx, task, at)
			if errors.Is(err, ErrNoCycle) {
				// Not made on this shard yet: the cycle as it stands
				// there, as Status shows a cycle not bootstrapped.
				return s.StatusAt(ctx, task, at)
			}
			return st, err
		}
	}
	return statusShards(ctx, task, shards, describe, status)
}

// statusShards is StatusShardsWithOpts with describe saying what a shard's
// ShardCycle.Error (and the verdict) tells of its database's error, and
// status reading one shard's cycle.
func statusShards(ctx context.Context, task string, shards []*Scheduler, describe func(error) string,
	status func(ctx context.Context, s *Scheduler, at time.Time) (*TaskStatus, error),
) (*ShardsStatus, error) {
	if len(shards) == 0 {
		return nil, errors.New("StatusShards needs one Scheduler per shard")
	}
	// Each shard's cycle running now, from its ledger, all at once; with a
	// deadline, in its first half, so that a shard that never answers
	// leaves the others the second half for their status. A shard none of
	// whose cycles has started yet gives its latest prepared instead,
	// which counts only when no shard's cycle has started: a cycle
	// prepared ahead on one shard never hides the one running on another.
	findCtx, cancel := halfDeadline(ctx)
	defer cancel()
	now := time.Now()
	failed := make([]error, len(shards))
	running := make([]time.Time, len(shards))
	prepared := make([]time.Time, len(shards))
	eachShard(shards, func(i int, s *Scheduler) {
		ctx := findCtx
		spec, err := s.spec(task)
		if err != nil {
			failed[i] = err
			return
		}
		if !s.configured {
			failed[i] = errNoRiverSchema
			return
		}
		led := s.ledger()
		start, _, found, err := led.CycleAt(ctx, s.pool, spec.Name, spec.PlanID, now)
		switch {
		case err != nil:
			failed[i] = err
			return
		case found:
			running[i] = start.UTC()
			return
		}
		latest, _, found, err := led.LatestCycle(ctx, s.pool, spec.Name, spec.PlanID)
		switch {
		case err != nil:
			failed[i] = err
		case found:
			prepared[i] = latest.UTC()
		}
	})
	out := &ShardsStatus{Task: task}
	for _, starts := range [][]time.Time{running, prepared} {
		for _, start := range starts {
			if start.After(out.CycleStart) {
				out.CycleStart = start
			}
		}
		if !out.CycleStart.IsZero() {
			break // a cycle running: a shard's prepared one does not count
		}
	}
	if out.CycleStart.IsZero() {
		var (
			down   []string
			causes []error
		)
		for i, err := range failed {
			if err != nil {
				down = append(down, shards[i].shard+": "+describe(err))
				causes = append(causes, err)
			}
		}
		if len(down) == 0 {
			return nil, &noCycleError{msg: fmt.Sprintf("task %q has no cycle on any of its %d shards", task, len(shards))}
		}
		return nil, &noCycleError{msg: fmt.Sprintf("task %q has no cycle on the shards that answered, and %d of %d did not (%s)",
			task, len(down), len(shards), strings.Join(down, "; ")), causes: causes}
	}
	// Each shard's status of that cycle, all at once. A shard whose
	// ledger does not record the cycle and that holds no map in force for
	// it (one that joins the fleet at a later cycle) serves none of its
	// slots: its nodes, which name their shard, refuse the cycle.
	cycles := make([]*CycleStatus, len(shards))
	made := make([]bool, len(shards))
	unmapped := make([]*CycleStatus, len(shards)) // as it stands there
	eachShard(shards, func(i int, s *Scheduler) {
		if failed[i] != nil {
			return
		}
		st, err := status(ctx, s, out.CycleStart)
		switch {
		case err == nil:
			cycles[i], made[i] = st.Current, true
		case errors.Is(err, ErrNoCycle):
			return
		default:
			failed[i] = err
			return
		}
		if c := st.Current; c.Shard == "" {
			_, recorded, err := s.ledger().CycleRecord(ctx, s.pool, task, c.Plan, out.CycleStart)
			switch {
			case err != nil:
				cycles[i], failed[i] = nil, err
			case !recorded:
				cycles[i], unmapped[i] = servesNone(c), c
			}
		}
	})
	// The cycle is sharded when a shard's cycle follows a map: a shard
	// without one in force then serves none of it. Otherwise (no shard
	// has a map in force) each shard's cycle is as it stands.
	sharded := slices.ContainsFunc(cycles, func(c *CycleStatus) bool { return c != nil && c.Shard != "" })
	for i := range cycles {
		if unmapped[i] != nil && !sharded {
			cycles[i], unmapped[i] = unmapped[i], nil
		}
	}

	out.OnTrack = true
	claims := map[int][]string{}
	slots := 0
	versions := map[int64]bool{}
	for i, s := range shards {
		sc := ShardCycle{Shard: s.shard, Status: cycles[i]}
		switch {
		case failed[i] != nil:
			sc.Error = describe(failed[i])
			out.Unreachable++
		case !made[i]:
			sc.Error = "the shard has not made the cycle"
		}
		out.Shards = append(out.Shards, sc)
		c := cycles[i]
		if c == nil {
			out.OnTrack = false
			continue
		}
		slots = max(slots, len(c.PerSlot))
		if unmapped[i] == nil {
			versions[c.ShardVersion] = true
		}
		for _, p := range c.PerSlot {
			if p.State != SlotElsewhere {
				claims[p.Slot] = append(claims[p.Slot], s.shard)
			}
		}
		out.SlotsDone += c.SlotsDone
		out.SlotsFailed += c.SlotsFailed
		out.BehindSlots += c.BehindSlots
		out.AccountsExpected += c.AccountsExpected
		out.Enqueued += c.Enqueued
		out.Synced += c.Synced
		out.Gone += c.Gone
		out.SkippedStale += c.SkippedStale
		out.SkippedUpstream += c.SkippedUpstream
		out.Pending += c.Pending
		out.Running += c.Running
		out.OnTrack = out.OnTrack && c.OnTrack
	}
	out.Slots = len(claims) // each slot once, however many shards claim it
	allAnswered := !slices.ContainsFunc(out.Shards, func(sc ShardCycle) bool { return sc.Status == nil })
	for slot := range slots {
		switch n := len(claims[slot]); {
		case n > 1:
			out.Conflicts = append(out.Conflicts, slot)
		case n == 0 && allAnswered:
			out.Unserved = append(out.Unserved, slot)
		}
	}
	if len(versions) > 1 {
		for v := range versions {
			out.MapVersions = append(out.MapVersions, v)
		}
		slices.Sort(out.MapVersions)
	}
	troubled := len(out.Conflicts) > 0 || len(out.Unserved) > 0 || len(out.MapVersions) > 0
	out.OnTrack = out.OnTrack && !troubled
	out.Starting = !out.OnTrack && allAnswered && !troubled &&
		!slices.ContainsFunc(out.Shards, func(sc ShardCycle) bool { return !sc.Status.OnTrack && !sc.Status.Starting })

	var parts []string
	for _, sc := range out.Shards {
		switch {
		case sc.Error != "":
			parts = append(parts, sc.Shard+": "+sc.Error)
		case !sc.Status.OnTrack:
			parts = append(parts, sc.Shard+": "+sc.Status.Verdict)
		}
	}
	var problems []string
	if len(out.Conflicts) > 0 {
		problems = append(problems, fmt.Sprintf("slots %v served by more than one shard (%s)", out.Conflicts, conflictOwners(out.Conflicts, claims)))
	}
	if len(out.Unserved) > 0 {
		problems = append(problems, fmt.Sprintf("slots %v served by no shard", out.Unserved))
	}
	if len(out.MapVersions) > 0 {
		vs := make([]string, len(out.MapVersions))
		for i, v := range out.MapVersions {
			vs[i] = "v" + strconv.FormatInt(v, 10)
			if v == 0 {
				vs[i] = "no map"
			}
		}
		problems = append(problems, "the shards followed different map versions ("+strings.Join(vs, ", ")+")")
	}
	if troubled {
		problems = append(problems, "the shards' maps disagree: check riverslot shards show and set the map again on every shard")
	}
	switch {
	case out.OnTrack:
		out.Verdict = "on track"
	case out.Starting:
		out.Verdict = fmt.Sprintf("starting (%s)", strings.Join(parts, "; "))
	case len(parts) > 0:
		out.Verdict = fmt.Sprintf("%d of %d shards not on track (%s)", len(parts), len(shards), strings.Join(parts, "; "))
		if len(problems) > 0 {
			out.Verdict += "; " + strings.Join(problems, "; ")
		}
	default:
		out.Verdict = strings.Join(problems, "; ")
	}
	return out, nil
}

// halfDeadline returns ctx with half its remaining time when it has a
// deadline (ctx itself when not): a first round over the shards in which
// one that never answers leaves the others the second half.
func halfDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, time.Until(deadline)/2)
}

// SlotShards names the shard serving each slot of the cycle, from the
// shards that answered: "" where none of them does (its shard did not
// answer, or no shard serves it), "a+b" where several do (Conflicts).
func (st *ShardsStatus) SlotShards() []string {
	slots := 0
	for _, sc := range st.Shards {
		if sc.Status != nil {
			slots = max(slots, len(sc.Status.PerSlot))
		}
	}
	owners := make([]string, slots)
	for _, sc := range st.Shards {
		if sc.Status == nil {
			continue
		}
		for _, p := range sc.Status.PerSlot {
			if p.State == SlotElsewhere || p.Slot < 0 || p.Slot >= slots {
				continue
			}
			if owners[p.Slot] != "" {
				owners[p.Slot] += "+"
			}
			owners[p.Slot] += sc.Shard
		}
	}
	return owners
}

// eachShard runs f for every shard at once and waits for them all.
func eachShard(shards []*Scheduler, f func(i int, s *Scheduler)) {
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Go(func() { f(i, s) })
	}
	wg.Wait()
}

// conflictOwners names the shards of each slot in conflicts ("2: a+b").
func conflictOwners(conflicts []int, claims map[int][]string) string {
	parts := make([]string, len(conflicts))
	for i, slot := range conflicts {
		parts[i] = fmt.Sprintf("%d: %s", slot, strings.Join(claims[slot], "+"))
	}
	return strings.Join(parts, ", ")
}

// servesNone returns c, the status of a cycle a shard has not made and
// holds no shard map in force for, as that shard serves it: none of its
// slots (every one elsewhere), on track.
func servesNone(c *CycleStatus) *CycleStatus {
	none := *c
	none.PerSlot = slices.Clone(c.PerSlot)
	for i := range none.PerSlot {
		p := &none.PerSlot[i]
		*p = SlotStatus{Slot: p.Slot, Start: p.Start, State: SlotElsewhere}
	}
	none.SlotsElsewhere, none.AccountsExpected, none.BehindSlots = len(none.PerSlot), 0, 0
	none.OffSlots, none.OffSlot, none.FailedSlot, none.FailedError = 0, -1, -1, ""
	none.OnTrack, none.Starting = true, false
	none.Verdict = "serves no slot of this cycle: no shard map in force here (the shard joins at a later cycle)"
	return &none
}
