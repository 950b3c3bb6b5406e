package perslot

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

func TestCatchUpWindow(t *testing.T) {
	t.Parallel()

	slot, cycle := 15*time.Second, 120*time.Second
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		late time.Duration
		want time.Duration
	}{
		{-time.Second, slot}, // not late at all: one slot
		{0, slot},
		{time.Second, slot},
		{15 * time.Second, slot},
		{16 * time.Second, 2 * slot},
		{61 * time.Second, 5 * slot},
		{10 * time.Minute, cycle}, // capped
	} {
		require.Equal(t, tt.want, catchUpWindow(start.Add(tt.late), start, slot, cycle), "late %s", tt.late)
	}
}

func TestPlace(t *testing.T) {
	t.Parallel()

	spec := riverslottest.Spec(t, "transactions", "s", "accounts", "", 120*time.Second, 100) // 8 slots of 15 s
	cycleStart := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const hash = uint64(1) << 63 // offset: half of any window
	slot := func(i int) time.Time { return cycleStart.Add(time.Duration(i) * 15 * time.Second) }

	t.Run("OffGridCycleKeepsItsOwnDeadline", func(t *testing.T) {
		t.Parallel()
		// A cycle starting 13 s off the node's grid (riverslot demo, another
		// TriggerOffset) ends a whole cycle after its start: slot 2, 50 s
		// late, still has 10 s of its half-cycle window and is spread. The
		// node's schedule would end the cycle at the next grid point, 107 s
		// after its start, and skip the slot's accounts.
		off := cycleStart.Add(13 * time.Second)
		require.Equal(t, off.Add(120*time.Second), spec.CycleEnd(off))
		require.Equal(t, cycleStart.Add(120*time.Second), spec.Schedule.Next(off), "the node's grid")
		slot2 := off.Add(2 * 15 * time.Second)
		now := slot2.Add(50 * time.Second)
		p := placeFixed(spec, now, off, spec.CycleEnd(off), slot2, hash, false)
		require.True(t, p.late)
		require.False(t, p.skip, "spread within the cycle's own half-cycle deadline")
		require.True(t, p.target.Before(slot2.Add(60*time.Second)), "before half a cycle after the slot's start: %s", p.target)
		p = placeFixed(spec, now, off, spec.Schedule.Next(off), slot2, hash, false)
		require.True(t, p.skip, "with the node's grid as the cycle's end the deadline has passed")
	})
	t.Run("NotAfterLeavesASpreadSyncLateGrace", func(t *testing.T) {
		t.Parallel()
		end := spec.CycleEnd(cycleStart)
		regular := slot(1).Add(7500 * time.Millisecond)
		// On time: half a cycle before its regular time in the next cycle.
		require.Equal(t, regular.Add(60*time.Second), spec.NotAfter(cycleStart, end, regular, regular))
		// Spread to just before the window's end: River may still start it
		// up to LateGrace late.
		spread := slot(1).Add(59 * time.Second)
		require.Equal(t, spread.Add(spec.LateGrace), spec.NotAfter(cycleStart, end, regular, spread))
	})
	t.Run("OnTimeKeepsTarget", func(t *testing.T) {
		t.Parallel()
		p := placeFixed(spec, slot(2).Add(-5*time.Second), cycleStart, spec.CycleEnd(cycleStart), slot(2), hash, false)
		require.False(t, p.skip)
		require.Equal(t, slot(2).Add(7500*time.Millisecond), p.target)
	})
	t.Run("WithinGraceKeepsTarget", func(t *testing.T) {
		t.Parallel()
		now := slot(2).Add(7500*time.Millisecond + spec.LateGrace)
		p := placeFixed(spec, now, cycleStart, spec.CycleEnd(cycleStart), slot(2), hash, false)
		require.False(t, p.skip)
		require.Equal(t, slot(2).Add(7500*time.Millisecond), p.target)
	})
	t.Run("LateIsSpreadOverTheCatchUpWindow", func(t *testing.T) {
		t.Parallel()
		now := slot(1).Add(25 * time.Second) // the slot is 25 s late: a 2-slot window of 30 s
		p := placeFixed(spec, now, cycleStart, spec.CycleEnd(cycleStart), slot(1), hash, false)
		require.False(t, p.skip)
		require.Equal(t, now.Add(15*time.Second), p.target)
	})
	t.Run("WindowEndsHalfACycleBeforeTheNextCycle", func(t *testing.T) {
		t.Parallel()
		// 40 s late: the catch-up window (3 slots, 45 s) is cut to end at
		// slot start + 60 s, 20 s from now, so the sync lands at least half a
		// cycle before the account's regular time in the next cycle.
		now := slot(1).Add(40 * time.Second)
		p := placeFixed(spec, now, cycleStart, spec.CycleEnd(cycleStart), slot(1), hash, false)
		require.False(t, p.skip)
		require.Equal(t, now.Add(10*time.Second), p.target)
		next := slot(1).Add(120*time.Second + 7500*time.Millisecond)
		require.GreaterOrEqual(t, next.Sub(p.target), 60*time.Second)
	})
	t.Run("MoreThanHalfACycleLateIsSkipped", func(t *testing.T) {
		t.Parallel()
		p := placeFixed(spec, slot(0).Add(61*time.Second), cycleStart, spec.CycleEnd(cycleStart), slot(0), hash, false)
		require.True(t, p.skip)
	})
	t.Run("StaleCycleIsSkipped", func(t *testing.T) {
		t.Parallel()
		// A whole cycle and a half late: the next cycle's regular time has
		// passed already.
		p := placeFixed(spec, slot(0).Add(180*time.Second), cycleStart, spec.CycleEnd(cycleStart), slot(0), hash, false)
		require.True(t, p.skip)
	})
	t.Run("SkipPolicySkipsLate", func(t *testing.T) {
		t.Parallel()
		skip := *spec
		skip.LatePolicy = taskspec.LatePolicySkip
		p := placeFixed(&skip, slot(1).Add(40*time.Second), cycleStart, skip.CycleEnd(cycleStart), slot(1), hash, false)
		require.True(t, p.skip)
	})
}

func TestRetryBackoff(t *testing.T) {
	t.Parallel()

	for attempt, want := range map[int]time.Duration{
		1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second,
		5: 16 * time.Second, 6: 30 * time.Second, 25: 30 * time.Second, 0: time.Second,
	} {
		require.Equal(t, want, retryBackoff(attempt), "attempt %d", attempt)
	}
}

func TestSyncedByOlderCycle(t *testing.T) {
	t.Parallel()

	oldPlan, err := slotplan.New(60 * time.Second) // 4 slots of 15 s
	require.NoError(t, err)
	oldStart := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	id := uuid.MustParse("6ba7b810-9dad-41d1-80b4-00c04fd430c8") // bucket 0xc8: slot 3 of 4
	oldTarget := oldPlan.Target(oldStart, 7, id)
	o := &overlap{plan: oldPlan, seed: 7, cycleStart: oldStart, slots: map[int]bool{3: true}}
	const cycle = 120 * time.Second // the new plan's

	// The new cycle starts with the old one: the old sync is inside it.
	require.True(t, syncedByOlderCycle([]*overlap{o}, id, oldTarget.Add(100*time.Second), oldStart, cycle))
	// A new cycle starting after the old sync: skipped only within half a cycle.
	later := oldTarget.Add(time.Second)
	require.True(t, syncedByOlderCycle([]*overlap{o}, id, oldTarget.Add(59*time.Second), later, cycle))
	require.False(t, syncedByOlderCycle([]*overlap{o}, id, oldTarget.Add(61*time.Second), later, cycle), "far enough apart and in another cycle: both sync")
	o.slots = map[int]bool{0: true, 1: true, 2: true} // slot 3's old per-slot job was cancelled or discarded
	require.False(t, syncedByOlderCycle([]*overlap{o}, id, oldTarget, oldStart, cycle), "the old cycle does not sync it: this one must")
	require.False(t, syncedByOlderCycle(nil, id, oldTarget, oldStart, cycle))

	// Pinned in the old cycle to slot 0 (its hash slot is 3): judged at its
	// pinned time, not its hash slot's.
	o.slots = map[int]bool{0: true, 1: true, 2: true, 3: true}
	o.pins = &taskspec.PinsRef{Task: "t", Plan: "p"}
	o.pinned = map[uuid.UUID]int{id: 0}
	pinnedTarget := oldPlan.SlotStart(oldStart, 0).Add(oldPlan.Offset(7, id))
	require.True(t, syncedByOlderCycle([]*overlap{o}, id, pinnedTarget.Add(59*time.Second), pinnedTarget.Add(time.Second), cycle),
		"within half a cycle of the pinned time")
	newTarget, newStart := oldTarget.Add(50*time.Second), oldTarget.Add(time.Second)
	require.False(t, syncedByOlderCycle([]*overlap{o}, id, newTarget, newStart, cycle),
		"near the hash slot's time, which the pinned account is not synced at, and more than half a cycle after its pinned time")
	o.pins = nil
	require.True(t, syncedByOlderCycle([]*overlap{o}, id, newTarget, newStart, cycle), "the same account judged by hash")
	o.pins = &taskspec.PinsRef{Task: "t", Plan: "p"}
	o.slots = map[int]bool{3: true} // slot 0's job cancelled: the pinned account is not synced by the old cycle
	require.False(t, syncedByOlderCycle([]*overlap{o}, id, pinnedTarget, oldStart, cycle))
}

// TestSyncedByOlderCycleChain: a plan change and its rollback. Plan A's
// cycle (60 s) syncs the account; plan B's cycle (120 s) starting with it
// leaves the account to A's; then A again, its next cycle. B's cycle does
// not sync the account, so it does not keep A's next cycle from it: the
// account is synced once in each of A's cycles. Judging B's cycle alone (as
// if it synced every account of its slots) skips it there, leaving it
// unsynced for two of A's cycles.
func TestSyncedByOlderCycleChain(t *testing.T) {
	t.Parallel()

	planA, err := slotplan.New(60 * time.Second) // 4 slots of 15 s
	require.NoError(t, err)
	planB, err := slotplan.New(120 * time.Second) // 8 slots of 15 s
	require.NoError(t, err)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	all := func(n int) map[int]bool {
		m := map[int]bool{}
		for i := range n {
			m[i] = true
		}
		return m
	}
	// A's cycle at start is the regular neighbour of A's next: replay only.
	a := &overlap{plan: planA, seed: 7, cycleStart: start, recorded: start, slots: all(4), replayOnly: true}
	b := &overlap{plan: planB, seed: 9, cycleStart: start, recorded: start.Add(time.Second), slots: all(8)}
	next := start.Add(60 * time.Second) // A's next cycle, after the rollback

	var skippedAlone, skippedChain, checked int
	for i := range 2000 {
		id := uuid.New()
		id[15] = byte(i)
		aTarget := planA.Target(start, 7, id)
		bTarget := planB.Target(start, 9, id)
		nextTarget := planA.Target(next, 7, id)
		// B left the account to A (A's sync is inside B's cycle).
		aForB := *a
		aForB.replayOnly = false // another plan's cycle, seen from B
		require.True(t, syncedByOlderCycle([]*overlap{&aForB}, id, bTarget, start, planB.Cycle))
		if syncedByOlderCycle([]*overlap{b}, id, nextTarget, next, planA.Cycle) {
			skippedAlone++
		}
		if syncedByOlderCycle([]*overlap{a, b}, id, nextTarget, next, planA.Cycle) {
			skippedChain++
		}
		// A's neighbour alone never keeps A's next cycle from an account.
		require.False(t, syncedByOlderCycle([]*overlap{a}, id, nextTarget, next, planA.Cycle), "a regular neighbour, %s before", nextTarget.Sub(aTarget))
		checked++
	}
	require.Positive(t, skippedAlone, "judged alone, B's cycle would take accounts from A's next cycle")
	require.Zero(t, skippedChain, "B synced none of them: A's next cycle syncs all %d", checked)
}

// TestSyncedByOlderCycleLateSpread: an older cycle whose fan-out of the
// account's slot ran late spread the account to some time after its
// batch, which the ledger bounds by the slot's start and finish only. A
// cycle on another grid (a TriggerOffset change) starting after the
// account's regular time but before that spread must leave the account to
// it. Judged at the older cycle's regular time, the account was synced by
// both, seconds apart (a deploy chain of real processes found it).
func TestSyncedByOlderCycleLateSpread(t *testing.T) {
	t.Parallel()

	spec := riverslottest.Spec(t, "transactions", "s", "accounts", "", 24*time.Second, 100) // 8 slots of 3 s, LateGrace 3 s
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	id := uuid.MustParse("6ba7b810-9dad-41d1-80b4-00c04fd43045") // bucket 0x45 = 69: slot 2 of 8 (6 s to 9 s)
	require.Equal(t, 2, spec.Plan.SlotOf(id))
	regular := spec.Plan.Target(t0, spec.Seed, id)
	older := func(run fanOut, seen time.Time) *overlap {
		return &overlap{plan: spec.Plan, seed: spec.Seed, cycleStart: t0, slots: map[int]bool{2: true},
			runs: map[int]fanOut{2: run}, late: &lateRules{spec: spec, cycleEnd: t0.Add(24 * time.Second)}, seen: seen}
	}
	// The new cycle: 10 s after the older one (another grid), the account
	// at 28 s, more than half a cycle after its regular time in the older
	// cycle (at most 9 s).
	newStart, target := t0.Add(10*time.Second), t0.Add(28*time.Second)
	require.Greater(t, target.Sub(regular), 12*time.Second)

	onTime := fanOut{from: t0.Add(4 * time.Second), to: t0.Add(5 * time.Second), spread: true, skipped: true}
	require.False(t, syncedByOlderCycle([]*overlap{older(onTime, time.Time{})}, id, target, newStart, spec.Plan.Cycle),
		"placed at its regular time, 19 s or more before this one: both sync")

	late := fanOut{from: t0.Add(14 * time.Second), to: t0.Add(14 * time.Second), spread: true, skipped: true} // 5 s or more late: spread
	sp, ok := older(late, time.Time{}).target(id)
	require.True(t, ok)
	require.Equal(t, late.from, sp.lo, "spread from its batch on")
	require.Equal(t, t0.Add(18*time.Second), sp.hi, "at most until the slot's late deadline, half a cycle after its start")
	require.True(t, syncedByOlderCycle([]*overlap{older(late, time.Time{})}, id, target, newStart, spec.Plan.Cycle),
		"spread between 14 s and 18 s: inside this cycle, and less than half a cycle before 28 s")

	// A pending fan-out places its accounts from when the overlaps were
	// read (seen), as overlaps records it.
	pending := func(seen time.Time) fanOut { return fanOut{from: seen, pending: true, spread: true, skipped: true} }
	require.True(t, syncedByOlderCycle([]*overlap{older(pending(t0.Add(14*time.Second)), t0.Add(14*time.Second))}, id, target, newStart, spec.Plan.Cycle),
		"a pending fan-out already past the account's time spreads it when it runs")
	require.False(t, syncedByOlderCycle([]*overlap{older(pending(t0.Add(time.Second)), t0.Add(time.Second))}, id, target, newStart, spec.Plan.Cycle),
		"a pending fan-out still ahead of the account's time places it on time")

	pastDeadline := fanOut{from: t0.Add(19 * time.Second), to: t0.Add(19 * time.Second), spread: true, skipped: true}
	_, ok = older(pastDeadline, time.Time{}).target(id)
	require.False(t, ok, "a fan-out past the slot's late deadline skips the account")

	// The ledger's counts say what the older fan-out did with its late
	// accounts, whatever this node's late policy is.
	skippedOnly := late
	skippedOnly.spread = false
	_, ok = older(skippedOnly, time.Time{}).target(id)
	require.False(t, ok, "it recorded late accounts skipped and none spread: this one was skipped")
	neither := skippedOnly
	neither.skipped = false
	sp, ok = older(neither, time.Time{}).target(id)
	require.True(t, ok)
	require.Equal(t, span{regular, regular}, sp, "it recorded no late account: at its regular time")

	skip := *spec
	skip.LatePolicy = taskspec.LatePolicySkip
	o := older(pending(t0.Add(14*time.Second)), t0.Add(14*time.Second))
	o.late.spec = &skip
	_, ok = o.target(id)
	require.False(t, ok, "LatePolicySkip: a pending fan-out past the account's time skips it, this cycle must sync it")
	o = older(late, time.Time{})
	o.late.spec = &skip
	_, ok = o.target(id)
	require.True(t, ok, "a finished fan-out that recorded spread accounts spread them, whatever this node's policy")
}

// TestSyncedByOlderCycleInsertedAllOrNone: what an older cycle's slot did is read
// from the ledger's counts where they tell (it inserted every account it
// selected, or none), not replayed from the cycles still in view. Here Y's
// replay, seeing W's sync 5 s before Y's, would say Y left the account to
// W; the cycle W itself left it to (out of view, older) is what made Y
// sync it. Judged by the replay, Z synced the account 8 s after Y.
func TestSyncedByOlderCycleInsertedAllOrNone(t *testing.T) {
	t.Parallel()

	spec := riverslottest.Spec(t, "transactions", "s", "accounts", "", 24*time.Second, 100) // 8 slots of 3 s
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	id := uuid.MustParse("6ba7b810-9dad-41d1-80b4-00c04fd43045") // slot 2 of 8
	cycle := func(start time.Time) *overlap {
		return &overlap{plan: spec.Plan, seed: spec.Seed, cycleStart: start, recorded: start, slots: map[int]bool{2: true}}
	}
	w, y := cycle(t0), cycle(t0.Add(5*time.Second))
	ySync := spec.Plan.Target(y.cycleStart, spec.Seed, id)
	zStart, zTarget := t0.Add(12*time.Second), ySync.Add(8*time.Second)

	require.False(t, syncedByOlderCycle([]*overlap{w, y}, id, zTarget, zStart, spec.Plan.Cycle), "replayed: Y left it to W, W is 13 s away")
	y.insertedAll = map[int]bool{2: true}
	require.True(t, syncedByOlderCycle([]*overlap{w, y}, id, zTarget, zStart, spec.Plan.Cycle), "Y's slot inserted every account: Y synced it 8 s before")
	y.insertedAll = map[int]bool{2: false}
	require.False(t, syncedByOlderCycle([]*overlap{y}, id, zTarget, zStart, spec.Plan.Cycle), "Y's slot inserted none: only this cycle syncs it")
}

// placeFixed is place for a fixed plan's account of offset hash hash in the
// slot starting at slotStart.
func placeFixed(spec *taskspec.Spec, now, cycleStart, cycleEnd, slotStart time.Time, hash uint64, first bool) placement {
	return place(spec, now, cycleStart, cycleEnd, slotStart, spec.Plan.SlotDuration, slotStart.Add(slotplan.OffsetIn(hash, spec.Plan.SlotDuration)), hash, first)
}
