package taskspec_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

// The expected values in this file are worked out by hand from the rules
// in the doc comments, not computed with the package's own helpers: a
// 160 s cycle has gcd(160, 256) = 32 slots of 5 s, and the hash 1<<63 puts
// an account exactly in the middle of any window (OffsetIn takes the high
// word of hash × window in µs, so 2^63 × w / 2^64 = w/2).

const half = uint64(1) << 63

// t0 is a cycle start of a 160 s UTC grid: 1,800,000,000 s is a multiple
// of 160.
var t0 = time.Unix(1_800_000_000, 0).UTC()

// spec160 returns a spec of a 160 s cycle (32 slots of 5 s) on the UTC grid
// with the default LateGrace (one slot) and the given late policy.
func spec160(t *testing.T, policy taskspec.LatePolicy) *taskspec.Spec {
	t.Helper()
	plan, err := slotplan.New(160 * time.Second)
	require.NoError(t, err)
	require.Equal(t, 32, plan.Slots)
	require.Equal(t, 5*time.Second, plan.SlotDuration)
	schedule, err := slotplan.NewSchedule(160*time.Second, 0, nil)
	require.NoError(t, err)
	require.True(t, schedule.Start(t0).Equal(t0), "t0 must be on the grid")
	s := &taskspec.Spec{
		Name: "t", Plan: plan, Schedule: schedule, Seed: 7, Key: taskspec.KeyOf(plan, 7, 0), PlanID: taskspec.PlanID(plan, 7, 0),
		Table: "accounts", IDColumn: "id",
		LatePolicy: policy, LateGrace: 5 * time.Second, Lead: 2500 * time.Millisecond,
	}
	s.BuildSQL()
	return s
}

func TestPlace(t *testing.T) {
	t.Parallel()

	s := spec160(t, taskspec.LatePolicySpread)
	slot2 := t0.Add(10 * time.Second) // slot 2 of 32 starts 2 × 5 s into the cycle
	target := slot2.Add(2500 * time.Millisecond)

	for _, tt := range []struct {
		name       string
		now        time.Time
		want       time.Time
		late, skip bool
	}{
		// Before the slot (the lead): the account's own target.
		{"Early", slot2.Add(-2500 * time.Millisecond), target, false, false},
		// Exactly LateGrace past the target still keeps it.
		{"AtGrace", target.Add(5 * time.Second), target, false, false},
		// 12 s into the slot, 9.5 s past the target: late. The slot is 12 s
		// late, rounded up to 3 slots: a 15 s window from now, the account
		// in its middle. The deadline (T0 + 160 + 10 - 80 = T0 + 90 s) is
		// 68 s away and does not cut it.
		{"Spread", slot2.Add(12 * time.Second), slot2.Add(12*time.Second + 7500*time.Millisecond), true, false},
		// Nanoseconds of now are truncated away: microseconds, as Postgres.
		{"SpreadTruncated", slot2.Add(12*time.Second + 999), slot2.Add(12*time.Second + 7500*time.Millisecond), true, false},
		// 75 s into the slot (T0 + 85 s): a 15-slot window, cut by the
		// deadline to 5 s; the account in its middle.
		{"CutByDeadline", t0.Add(85 * time.Second), t0.Add(87500 * time.Millisecond), true, false},
		// Past the deadline (T0 + 90 s): no window is left, skipped.
		{"PastDeadline", t0.Add(90 * time.Second), time.Time{}, true, true},
		{"LongPastDeadline", t0.Add(150 * time.Second), time.Time{}, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, late, skip := s.Place(tt.now, t0, slot2, half)
			require.Equal(t, tt.late, late, "late")
			require.Equal(t, tt.skip, skip, "skip")
			require.True(t, tt.want.Equal(got), "target: got %s, want %s", got, tt.want)
		})
	}

	t.Run("JustPastGrace", func(t *testing.T) {
		// 1 µs past the grace: late, in a 2-slot window (the slot is 7.5 s
		// late): now + 5 s.
		now := target.Add(5*time.Second + time.Microsecond)
		got, late, skip := s.Place(now, t0, slot2, half)
		require.True(t, late)
		require.False(t, skip)
		require.True(t, now.Add(5*time.Second).Equal(got), "got %s", got)
	})

	t.Run("OffsetZero", func(t *testing.T) {
		// Hash 0 is the start of the slot, and of a catch-up window.
		got, late, _ := s.Place(slot2, t0, slot2, 0)
		require.False(t, late)
		require.True(t, slot2.Equal(got))
		now := slot2.Add(20 * time.Second)
		got, late, skip := s.Place(now, t0, slot2, 0)
		require.True(t, late)
		require.False(t, skip)
		require.True(t, now.Equal(got))
	})

	t.Run("Skip", func(t *testing.T) {
		s := spec160(t, taskspec.LatePolicySkip)
		got, late, skip := s.Place(target.Add(5*time.Second), t0, slot2, half)
		require.False(t, late)
		require.False(t, skip)
		require.True(t, target.Equal(got))
		got, late, skip = s.Place(slot2.Add(12*time.Second), t0, slot2, half)
		require.True(t, late)
		require.True(t, skip, "LatePolicySkip skips every late account")
		require.True(t, got.IsZero())
	})
}

func TestPlaceIn(t *testing.T) {
	t.Parallel()

	// A cycle the bootstrap recorded as ending 200 s after its start (it
	// was made on another grid, or is a 25 h DST day scaled down): the
	// deadline is cycleEnd + (slot start - cycle start) - cycle/2 =
	// T0 + 200 + 10 - 80 = T0 + 130 s, not the schedule's T0 + 90 s.
	s := spec160(t, taskspec.LatePolicySpread)
	slot2 := t0.Add(10 * time.Second)
	cycleEnd := t0.Add(200 * time.Second)

	// At T0 + 100 s the schedule's cycle has no window left...
	_, late, skip := s.Place(t0.Add(100*time.Second), t0, slot2, half)
	require.True(t, late)
	require.True(t, skip)
	// ...and the recorded one has 30 s: a 90 s catch-up window cut to 30 s,
	// the account in its middle.
	got, late, skip := s.PlaceIn(t0.Add(100*time.Second), t0, cycleEnd, slot2, half)
	require.True(t, late)
	require.False(t, skip)
	require.True(t, t0.Add(115*time.Second).Equal(got), "got %s", got)
	// At the recorded deadline, skipped.
	_, _, skip = s.PlaceIn(t0.Add(130*time.Second), t0, cycleEnd, slot2, half)
	require.True(t, skip)

	// Place is PlaceIn with the schedule's own cycle end.
	for _, now := range []time.Time{slot2, slot2.Add(12 * time.Second), t0.Add(85 * time.Second)} {
		a, al, as := s.Place(now, t0, slot2, half)
		b, bl, bs := s.PlaceIn(now, t0, t0.Add(160*time.Second), slot2, half)
		require.True(t, a.Equal(b))
		require.Equal(t, al, bl)
		require.Equal(t, as, bs)
	}
}

func TestCatchUpWindow(t *testing.T) {
	t.Parallel()

	slot := 5 * time.Second
	for _, tt := range []struct {
		late, want time.Duration
	}{
		{-time.Second, 5 * time.Second}, // not late yet: one slot
		{0, 5 * time.Second},
		{time.Nanosecond, 5 * time.Second},
		{5 * time.Second, 5 * time.Second},
		{5*time.Second + time.Nanosecond, 10 * time.Second}, // rounded up to whole slots
		{12 * time.Second, 15 * time.Second},
		{1000 * time.Second, 160 * time.Second}, // at most a cycle
	} {
		require.Equal(t, tt.want, taskspec.CatchUpWindow(t0.Add(tt.late), t0, slot, 160*time.Second), "late %s", tt.late)
	}
}

func TestCycleEnd(t *testing.T) {
	t.Parallel()

	s := spec160(t, taskspec.LatePolicySpread)
	require.True(t, t0.Add(160*time.Second).Equal(s.CycleEnd(t0)))
	// A start off the task's grid (riverslot demo, another TriggerOffset):
	// start + Cycle.
	off := t0.Add(7 * time.Second)
	require.True(t, off.Add(160*time.Second).Equal(s.CycleEnd(off)))

	// A daily cycle at 00:30 London time: the EU changed clocks on
	// 2026-03-29 (spring, a 23 h day) and 2026-10-25 (autumn, 25 h).
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	plan, err := slotplan.New(24 * time.Hour)
	require.NoError(t, err)
	schedule, err := slotplan.NewSchedule(24*time.Hour, 30*time.Minute, london)
	require.NoError(t, err)
	daily := &taskspec.Spec{Plan: plan, Schedule: schedule}
	for _, tt := range []struct {
		day  int
		mon  time.Month
		want time.Duration
	}{
		{28, time.March, 24 * time.Hour},
		{29, time.March, 23 * time.Hour},
		{25, time.October, 25 * time.Hour},
		{26, time.October, 24 * time.Hour},
	} {
		start := time.Date(2026, tt.mon, tt.day, 0, 30, 0, 0, london)
		require.Equal(t, tt.want, daily.CycleEnd(start).Sub(start), "cycle of %s", start)
	}
	// Off its grid (00:45), a daily cycle is 24 h whatever the day.
	start := time.Date(2026, time.March, 29, 0, 45, 0, 0, london)
	require.Equal(t, 24*time.Hour, daily.CycleEnd(start).Sub(start))
}

func TestNotAfter(t *testing.T) {
	t.Parallel()

	s := spec160(t, taskspec.LatePolicySpread)
	cycleEnd := t0.Add(160 * time.Second)
	regular := t0.Add(12500 * time.Millisecond) // slot 2, mid-slot

	// Half a cycle before the account's regular time in the next cycle:
	// T0 + 160 + 12.5 - 80 = T0 + 92.5 s.
	want := t0.Add(92500 * time.Millisecond)
	require.True(t, want.Equal(s.NotAfter(t0, cycleEnd, regular, regular)))
	// A spread sync scheduled at T0 + 80 s: T0 + 85 s is still before.
	require.True(t, want.Equal(s.NotAfter(t0, cycleEnd, regular, t0.Add(80*time.Second))))
	// Scheduled at T0 + 90 s, it gets LateGrace (5 s): T0 + 95 s.
	require.True(t, t0.Add(95*time.Second).Equal(s.NotAfter(t0, cycleEnd, regular, t0.Add(90*time.Second))))
	// A longer recorded cycle moves the bound with it: T0 + 200 + 12.5 - 80.
	require.True(t, t0.Add(132500*time.Millisecond).Equal(s.NotAfter(t0, t0.Add(200*time.Second), regular, regular)))

	// Every sync Place spreads is not stale before LateGrace has passed.
	slot2 := t0.Add(10 * time.Second)
	for late := 11 * time.Second; late < 80*time.Second; late += 3 * time.Second { // past every target + LateGrace
		for _, hash := range []uint64{0, 1 << 62, half, ^uint64(0)} {
			now := slot2.Add(late)
			got, wasLate, skip := s.Place(now, t0, slot2, hash)
			if skip {
				continue
			}
			require.True(t, wasLate)
			regular := slot2.Add(slotplan.OffsetIn(hash, 5*time.Second))
			require.False(t, s.NotAfter(t0, cycleEnd, regular, got).Before(got.Add(s.LateGrace)),
				"late %s hash %x: NotAfter leaves less than LateGrace after the spread time", late, hash)
		}
	}
}

func TestPlanID(t *testing.T) {
	t.Parallel()

	plan, err := slotplan.New(120 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "120s/8/00000000000000ff", taskspec.PlanID(plan, 0xff, 0))
	require.Equal(t, "120s/8/9c1185a5c5e9fc54/+4", taskspec.PlanID(plan, 0x9c1185a5c5e9fc54, 4))

	k, err := taskspec.ParsePlanKey("120s/8/9c1185a5c5e9fc54/+4")
	require.NoError(t, err)
	require.Equal(t, 120*time.Second, k.Cycle)
	require.Equal(t, 8, k.Slots)
	require.Equal(t, uint64(0x9c1185a5c5e9fc54), k.Seed)
	require.Equal(t, 256, k.Buckets, "a plan id without /b has 256 buckets")
	require.Equal(t, 4, k.Shift)

	// 65,536 buckets: 86,400,000 ms = 2^10 × 84,375, so 1,024 slots.
	fine, err := slotplan.NewBuckets(24*time.Hour, 65536)
	require.NoError(t, err)
	require.Equal(t, "86400s/1024/00000000000000ff/b65536/+4", taskspec.PlanID(fine, 0xff, 4))
	k, err = taskspec.ParsePlanKey("86400s/1024/00000000000000ff/b65536/+4")
	require.NoError(t, err)
	require.Equal(t, []any{24 * time.Hour, 1024, uint64(0xff), 65536, 4}, []any{k.Cycle, k.Slots, k.Seed, k.Buckets, k.Shift})

	for _, bad := range []string{"120s/8", "120/8/ff", "120s/8/ff/4", "120s/8/ff/+x", "120s/x/ff", "120s/8/zz", "120s/8/ff/+1/2", "120s/8/ff/bx"} {
		_, err := taskspec.ParsePlanKey(bad)
		require.ErrorContains(t, err, "is not of the form <seconds>s/<slots>/<seed>[/b<buckets>][/+<shift>]", "plan id %q", bad)
		// From job args: a key that keeps the text and says why.
		var k taskspec.PlanKey
		require.NoError(t, k.UnmarshalText([]byte(bad)))
		require.Equal(t, bad, k.String())
		require.ErrorIs(t, k.Err(), taskspec.ErrPlanID)
	}
}

func TestForPlan(t *testing.T) {
	t.Parallel()

	s := spec160(t, taskspec.LatePolicySpread)
	s.Lead = 10 * time.Second // as a slot of 20 s or more would have
	s.LateGrace = 150 * time.Second
	own := *s

	t.Run("Own", func(t *testing.T) {
		for _, k := range []taskspec.PlanKey{{}, s.Key} {
			got, err := s.ForPlan(k, t0)
			require.NoError(t, err)
			require.Same(t, s, got, "plan id %q", k)
		}
	})

	t.Run("Other", func(t *testing.T) {
		// 120 s: 8 slots of 15 s. A cycle starting at 1,000 s after the
		// epoch is on the grid of offset 1000 mod 120 = 40 s.
		start := time.Unix(1000, 0).UTC()
		got, err := s.ForPlan(riverslottest.Key(t, "120s/8/00000000000000ff/+3"), start)
		require.NoError(t, err)
		require.NotSame(t, s, got)
		require.Equal(t, 120*time.Second, got.Plan.Cycle)
		require.Equal(t, 8, got.Plan.Slots)
		require.Equal(t, uint64(0xff), got.Seed)
		require.Equal(t, 3, got.Shift)
		require.Equal(t, "120s/8/00000000000000ff/+3", got.PlanID)
		require.Equal(t, 40*time.Second, got.Schedule.Offset)
		require.True(t, start.Equal(got.Schedule.Start(start)), "the cycle start is on the plan's grid")
		require.True(t, start.Add(120*time.Second).Equal(got.CycleEnd(start)))
		require.Equal(t, 7500*time.Millisecond, got.Lead, "Lead is capped at half the plan's slot")
		require.Equal(t, 120*time.Second, got.LateGrace, "LateGrace is capped at the plan's cycle")
		// The task itself, its table and SQL, are unchanged.
		require.Equal(t, s.SQL, got.SQL)
		require.Equal(t, own, *s, "ForPlan must not modify the spec")
	})

	t.Run("OtherBuckets", func(t *testing.T) {
		// A 65,536-bucket plan selects with the two-byte bucket: its own
		// queries, the task's unchanged.
		got, err := s.ForPlan(riverslottest.Key(t, "160s/256/0000000000000007/b65536"), t0) // 160,000 ms = 2^8 × 625
		require.NoError(t, err)
		require.Equal(t, 65536, got.Plan.Buckets)
		require.Contains(t, got.SQL.FirstPage, `get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14)`)
		require.NotContains(t, s.SQL.FirstPage, "get_byte(uuid_send(\"id\"), 14)")
		require.Equal(t, own, *s, "ForPlan must not modify the spec")
	})

	t.Run("BeforeTheEpoch", func(t *testing.T) {
		// -50 s: offset (-50 mod 120) = 70 s, never negative.
		start := time.Unix(-50, 0).UTC()
		got, err := s.ForPlan(riverslottest.Key(t, "120s/8/00000000000000ff"), start)
		require.NoError(t, err)
		require.Equal(t, 70*time.Second, got.Schedule.Offset)
		require.True(t, start.Equal(got.Schedule.Start(start)))
	})

	t.Run("PinsFrom", func(t *testing.T) {
		ref := spec160(t, taskspec.LatePolicySpread)
		ref.Name, ref.Weight = "ref", "weight"
		opp := *s
		opp.PinsFrom = ref
		// Same cycle length, another seed: the reference's pins still apply.
		got, err := opp.ForPlan(riverslottest.Key(t, "160s/32/0000000000000001/+16"), t0)
		require.NoError(t, err)
		require.Same(t, ref, got.PinsFrom)
		// Another cycle length: the reference has no such cycle; hash.
		got, err = opp.ForPlan(riverslottest.Key(t, "120s/8/0000000000000001/+4"), t0)
		require.NoError(t, err)
		require.Nil(t, got.PinsFrom)
		require.Same(t, ref, opp.PinsFrom, "ForPlan must not modify the spec")
	})

	t.Run("Invalid", func(t *testing.T) {
		for _, tt := range []struct{ id, want string }{
			{"120s/16/ff", "a 2m0s cycle of 256 buckets has 8 slots, not 16"},
			{"120s/8/ff/+8", "shift 8 out of [0, 8)"},
			{"121s/1/ff", "plan id \"121s/1/ff\": "},
			{"garbage", "is not of the form"},
		} {
			// As job args or a ledger row decode it.
			var k taskspec.PlanKey
			require.NoError(t, k.UnmarshalText([]byte(tt.id)))
			_, err := s.ForPlan(k, t0)
			require.ErrorContains(t, err, tt.want, "plan id %q", tt.id)
		}
	})
}

func TestPinsRef(t *testing.T) {
	t.Parallel()

	s := spec160(t, taskspec.LatePolicySpread)
	require.Nil(t, s.PinsRef(), "hash placement: no pins")

	weighted := spec160(t, taskspec.LatePolicySpread)
	weighted.Name, weighted.Schema, weighted.Weight = "payments", "app", "weight"
	require.Equal(t, &taskspec.PinsRef{Task: "payments", Plan: weighted.PlanID, Schema: "app"}, weighted.PinsRef())

	// A task OppositeOf the weighted one follows its pins, shifted by the
	// difference of their shifts (mod 32 slots).
	for _, tt := range []struct{ ref, self, want int }{
		{0, 16, 16},
		{4, 20, 16},
		{20, 4, 16}, // 4 - 20 + 32
		{3, 3, 0},
		{31, 0, 1},
	} {
		weighted.Shift = tt.ref
		opp := spec160(t, taskspec.LatePolicySpread)
		opp.Name, opp.Schema, opp.Shift, opp.PinsFrom = "reports", "other", tt.self, weighted
		require.Equal(t, &taskspec.PinsRef{Task: "payments", Plan: weighted.PlanID, Schema: "app", Shift: tt.want}, opp.PinsRef(),
			"reference shift %d, own %d", tt.ref, tt.self)
	}
}

func TestPerSlotStartAndOpts(t *testing.T) {
	t.Parallel()

	s := spec160(t, taskspec.LatePolicySpread)
	s.ControlQueue, s.ControlPriority = "control", 1
	// Slot 5 starts 25 s into the cycle; its job runs Lead (2.5 s) before.
	require.True(t, t0.Add(22500*time.Millisecond).Equal(s.PerSlotStart(t0, 5)))
	opts := s.BootstrapOpts()
	require.Equal(t, "control", opts.Queue)
	require.Equal(t, 1, opts.Priority)
	require.True(t, opts.UniqueOpts.ByArgs)
	require.Len(t, opts.UniqueOpts.ByState, 8, "unique in every River job state")
}

// TestPlaceOpposed: a task of an OppositeOf pair spreads a late account
// only within the rest of its own slot: the opposite task serves it in the
// slot half a cycle away, so its syncs stay at least half a cycle minus a
// slot away; later, the account is skipped. The same account of an
// unopposed task is spread further.
func TestPlaceOpposed(t *testing.T) {
	t.Parallel()

	s := spec160(t, taskspec.LatePolicySpread)
	s.LateGrace = time.Second
	opposed := *s
	opposed.Opposed = true
	slot2 := t0.Add(10 * time.Second)
	target := slot2.Add(2500 * time.Millisecond) // hash half: the middle of the 5 s slot
	slotEnd := slot2.Add(s.Plan.SlotDuration)

	for _, late := range []time.Duration{1001 * time.Millisecond, 2 * time.Second, 2499 * time.Millisecond} {
		now := target.Add(late)
		got, isLate, skip := opposed.Place(now, t0, slot2, half)
		require.True(t, isLate, "%s late", late)
		require.False(t, skip, "%s late: within its slot", late)
		require.False(t, got.Before(now), "%s late: not in the past", late)
		require.False(t, got.After(slotEnd), "%s late: within its slot, got %s past the target", late, got.Sub(target))
	}
	for _, late := range []time.Duration{2500 * time.Millisecond, 5 * time.Second, 12 * time.Second, 60 * time.Second} {
		_, isLate, skip := opposed.Place(target.Add(late), t0, slot2, half)
		require.True(t, isLate)
		require.True(t, skip, "%s late: a spread sync would come within half a cycle minus a slot of the opposite task's", late)
	}
	// Unopposed, 12 s late: spread over a 15 s window, past the slot.
	got, isLate, skip := s.Place(target.Add(12*time.Second), t0, slot2, half)
	require.True(t, isLate)
	require.False(t, skip)
	require.True(t, got.After(slotEnd), "an unopposed task spreads further: %s", got.Sub(target))
}

// TestRegularNotAfter pins the NotAfter of a sync at its regular time, the
// one the sync worker derives for a job whose args carry none: half a
// cycle before the account's regular time in the next cycle (which starts
// at the cycle's recorded end: 23 h later on a day clocks spring forward),
// and never less than LateGrace after the regular time.
func TestRegularNotAfter(t *testing.T) {
	t.Parallel()

	id := uuid.MustParse("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0ff")
	start := time.Date(2030, 3, 31, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name      string
		spec      *taskspec.Spec
		slot      int
		end       time.Time
		lateGrace time.Duration
	}{
		{"24h", riverslottest.Spec(t, "reports", "s", "accounts", "", 24*time.Hour, 100), 17, start.Add(24 * time.Hour), 0},
		{"23h day", riverslottest.Spec(t, "reports", "s", "accounts", "", 24*time.Hour, 100), 17, start.Add(23 * time.Hour), 0},
		{"65536 buckets", riverslottest.SpecBuckets(t, "reports", "s", "accounts", "", 24*time.Hour, 100, 65536), 700, start.Add(24 * time.Hour), 0},
		{"LateGrace above half a cycle", riverslottest.Spec(t, "reports", "s", "accounts", "", 2*time.Minute, 100), 3, start.Add(2 * time.Minute), 100 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := *tt.spec
			if tt.lateGrace > 0 {
				spec.LateGrace = tt.lateGrace
			}
			slotDur := spec.Plan.Cycle / time.Duration(spec.Plan.Slots)
			offset := spec.Regular(start, tt.slot, id).Sub(start.Add(time.Duration(tt.slot) * slotDur))
			require.GreaterOrEqual(t, offset, time.Duration(0), "the regular time is in its slot")
			require.Less(t, offset, slotDur, "the regular time is in its slot")
			// The same offset in every cycle, and from the seed alone.
			require.Equal(t, offset, spec.Regular(start.Add(spec.Plan.Cycle), tt.slot, id).Sub(start.Add(spec.Plan.Cycle+time.Duration(tt.slot)*slotDur)))
			other := spec
			other.Seed++
			require.NotEqual(t, offset, other.Regular(start, tt.slot, id).Sub(start.Add(time.Duration(tt.slot)*slotDur)), "another seed, another offset")

			regular := start.Add(time.Duration(tt.slot)*slotDur + offset)
			want := tt.end.Add(regular.Sub(start)).Add(-spec.Plan.Cycle / 2) // half a cycle before next cycle's regular time
			if g := regular.Add(spec.LateGrace); g.After(want) {
				want = g
			}
			require.True(t, want.Equal(spec.RegularNotAfter(start, tt.end, tt.slot, id)), "got %s, want %s", spec.RegularNotAfter(start, tt.end, tt.slot, id), want)
		})
	}
}
