package taskspec_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
)

// TestMonthlyNextMonthLimits: a monthly task's sync limits (NotAfter,
// RegularNotAfter) and late deadlines (LateDeadline, and so Place) keep a
// sync of one month at least half the shorter of the month and the next
// before the account's regular time in the next month, which is the
// account's fraction of the next month's length (Month.Target there), not
// its offset in this month: after 31 days of January the last accounts are
// due 28 days into February, not 31. The expected values are computed here
// from the calendar and Month.Target of the next month.
func TestMonthlyNextMonthLimits(t *testing.T) {
	t.Parallel()
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(41, 41))
	ids := [][16]byte{}
	for _, edge := range [][2]byte{{0xff, 0xff}, {0xff, 0xfe}, {0x80, 0}, {0, 0}} {
		var id [16]byte
		for i := range 14 {
			id[i] = byte(rng.Uint32())
		}
		id[15], id[14] = edge[0], edge[1] // the bucket: the fraction's high bits
		ids = append(ids, id)
	}
	for range 2000 {
		var id [16]byte
		for i := range id {
			id[i] = byte(rng.Uint32())
		}
		ids = append(ids, id)
	}

	for _, tt := range []struct {
		name  string
		loc   *time.Location
		year  int
		month time.Month
		gap   time.Duration // half the shorter of the two months
	}{
		{"JanuaryToFebruary", time.UTC, 2027, time.January, 14 * 24 * time.Hour},
		{"FebruaryToMarch", time.UTC, 2027, time.February, 14 * 24 * time.Hour},
		{"LeapFebruaryToMarch", time.UTC, 2028, time.February, 29 * 12 * time.Hour},
		{"AprilToMay", time.UTC, 2027, time.April, 15 * 24 * time.Hour},
		{"LondonJanuaryToFebruary", london, 2027, time.January, 14 * 24 * time.Hour},
		{"LondonFebruaryToMarch", london, 2027, time.February, 14 * 24 * time.Hour}, // March has 743 h
		{"LondonMarchToApril", london, 2027, time.March, 15 * 24 * time.Hour},       // 743 h, then 720 h
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := monthlyConfig(tt.loc)
			specs, err := taskspec.Build([]taskspec.Config{c})
			require.NoError(t, err)
			s := specs[0]

			start := time.Date(tt.year, tt.month, 1, 0, 0, 0, 0, tt.loc)
			next := time.Date(tt.year, tt.month+1, 1, 0, 0, 0, 0, tt.loc)
			thisLen, nextLen := next.Sub(start), time.Date(tt.year, tt.month+2, 1, 0, 0, 0, 0, tt.loc).Sub(next)
			require.Equal(t, tt.gap, min(thisLen, nextLen)/2)
			end := s.CycleEnd(start)
			require.True(t, end.Equal(next))
			// No sync of the month runs past half the month after its end
			// (plus LateGrace): what the ledger records as its deadline.
			bound := next.Add(thisLen / 2)
			require.True(t, bound.Add(s.LateGrace).Equal(s.SyncsUntil(start, end)))

			earliestNext := map[int]time.Time{} // per day: the earliest next-month place of its accounts
			for _, id := range ids {
				day := s.SlotOf(start, id)
				regular := s.Regular(start, day, id)
				nextRegular := s.Month.Target(next, s.Seed, id)
				if e, ok := earliestNext[day]; !ok || nextRegular.Before(e) {
					earliestNext[day] = nextRegular
				}
				want := nextRegular.Add(-tt.gap)
				if want.After(bound) {
					want = bound
				}
				if g := regular.Add(s.LateGrace); g.After(want) {
					want = g
				}
				got := s.RegularNotAfter(start, end, day, id)
				require.GreaterOrEqual(t, nextRegular.Sub(got), tt.gap, "account %x: NotAfter %s, next regular %s: at least half the shorter month before it", id, got, nextRegular)
				require.True(t, want.Equal(got), "account %x: RegularNotAfter %s, want %s (next regular %s)", id, got, want, nextRegular)

				// NotAfter knows the regular time, not the account: never
				// later than the exact limit, at most 2 µs earlier.
				na := s.NotAfter(start, end, regular, regular)
				require.False(t, na.After(want), "account %x: NotAfter %s after %s", id, na, want)
				require.LessOrEqual(t, want.Sub(na), 2*time.Microsecond, "account %x: NotAfter %s, want %s", id, na, want)
				require.False(t, na.After(s.SyncsUntil(start, end)))
			}

			for day := s.Slots(start) - 1; day >= 0; day-- { // the last days first: the old limit failed them
				slotStart := s.SlotStart(start, day)
				deadline := s.LateDeadline(start, end, slotStart)
				// The day's start as a fraction of this month, in the next.
				place := next.Add(time.Duration(float64(slotStart.Sub(start)) * float64(nextLen) / float64(thisLen)))
				want := place.Add(-tt.gap)
				if want.After(bound) {
					want = bound
				}
				if e, ok := earliestNext[day]; ok {
					require.GreaterOrEqual(t, e.Sub(deadline), tt.gap, "day %d: a late sync at the deadline is half the shorter month before the next regular time of the day's accounts", day+1)
				}
				require.InDelta(t, float64(want.UnixMicro()), float64(deadline.UnixMicro()), 2, "day %d: LateDeadline %s, want %s", day+1, deadline, want)
			}

			// A late spread sync, placed by the fan-out of a day two days
			// late, starts at least half the shorter month before the
			// account's next regular time.
			placed := 0
			for _, id := range ids {
				day := s.SlotOf(start, id)
				slotStart := s.SlotStart(start, day)
				regular := s.Regular(start, day, id)
				now := slotStart.Add(2*s.SlotLen(start, day) + time.Hour)
				target, late, skip := s.PlaceRegular(now, start, end, slotStart, s.SlotLen(start, day), regular, uint64(id[0])<<56|uint64(id[1])<<48, false)
				require.True(t, late)
				if skip {
					continue
				}
				placed++
				nextRegular := s.Month.Target(next, s.Seed, id)
				require.GreaterOrEqual(t, nextRegular.Sub(target), tt.gap, "account %x placed at %s, next regular %s", id, target, nextRegular)
			}
			require.Greater(t, placed, len(ids)/2, "most late accounts are spread, not skipped")
		})
	}
}
