package slotplan

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func randomIDs(rng *rand.Rand, n int) [][16]byte {
	ids := make([][16]byte, n)
	for i := range ids {
		for j := range ids[i] {
			ids[i][j] = byte(rng.UintN(256))
		}
	}
	return ids
}

// TestMonthly: in a zone with DST, through 2027 (a 743-hour March, a
// 745-hour October, a 28-day February), every account is due once in
// every month, inside it, at the same fraction of it; on the day DayOf
// names; in that day's bucket range; and each day's range only touches
// its neighbours'.
func TestMonthly(t *testing.T) {
	t.Parallel()
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	m, err := NewMonthly(london)
	require.NoError(t, err)
	_, err = NewMonthly(nil)
	require.ErrorContains(t, err, "time.UTC")

	ids := randomIDs(rand.New(rand.NewPCG(1, 2)), 2000)
	const seed = 42
	start := m.MonthStart(time.Date(2027, 1, 17, 12, 0, 0, 0, time.UTC))
	require.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, london), start)
	lengths := map[time.Month]time.Duration{}
	for range 12 {
		next := m.NextMonth(start)
		length := next.Sub(start)
		lengths[start.Month()] = length
		days := m.Days(start)
		require.Equal(t, start, m.MonthStart(next.Add(-time.Nanosecond)), "the month's last instant is in it")
		require.Equal(t, next, m.DayStart(start, days), "day Days is the next month's start")
		// The days' bucket ranges cover every bucket, in order, each
		// sharing at most its boundary bucket with the next.
		prevHi := -1
		for d := range days {
			lo, hi := m.DayBuckets(start, d)
			require.LessOrEqual(t, lo, hi, "day %d", d)
			require.Contains(t, []int{prevHi, prevHi + 1}, lo, "%s day %d starts where day %d ended", start.Month(), d, d-1)
			prevHi = hi
		}
		require.Equal(t, BucketsTwoByte-1, prevHi)
		for _, id := range ids {
			due := m.Target(start, seed, id)
			require.False(t, due.Before(start), "due in its month")
			require.True(t, due.Before(next), "due in its month")
			// The same fraction every month, within the microsecond the
			// target is truncated to.
			want := float64(Fraction(seed, id)) / math.Pow(2, 64)
			require.InDelta(t, want, float64(due.Sub(start))/float64(length), float64(time.Microsecond)/float64(length))
			d := m.DayOf(start, seed, id)
			require.False(t, due.Before(m.DayStart(start, d)))
			require.True(t, due.Before(m.DayStart(start, d+1)))
			lo, hi := m.DayBuckets(start, d)
			b := BucketOf(id, BucketsTwoByte)
			require.True(t, b >= lo && b <= hi, "%s day %d: bucket %d in [%d, %d]", start.Month(), d, b, lo, hi)
		}
		start = next
	}
	require.Equal(t, 743*time.Hour, lengths[time.March], "London springs forward in March")
	require.Equal(t, 745*time.Hour, lengths[time.October])
	require.Equal(t, 28*24*time.Hour, lengths[time.February])
	// The 23-hour day: 28 March 2027 is 23 hours long.
	march := time.Date(2027, 3, 1, 0, 0, 0, 0, london)
	require.Equal(t, 23*time.Hour, m.DayStart(march, 28).Sub(m.DayStart(march, 27)))
}

// TestMonthlyEven: accounts spread over a month's days in proportion to the
// days' lengths (chi-square over March in London, whose 28th is 23 hours
// long, and over February), and an account keeps its place when others are
// added.
func TestMonthlyEven(t *testing.T) {
	t.Parallel()
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	m, err := NewMonthly(london)
	require.NoError(t, err)
	ids := randomIDs(rand.New(rand.NewPCG(3, 4)), 80_000)
	for _, month := range []time.Time{time.Date(2027, 3, 1, 0, 0, 0, 0, london), time.Date(2027, 2, 1, 0, 0, 0, 0, london)} {
		days := m.Days(month)
		counts := make([]int, days)
		for _, id := range ids {
			counts[m.DayOf(month, 7, id)]++
		}
		length := m.NextMonth(month).Sub(month)
		var chi2 float64
		for d, n := range counts {
			share := float64(m.DayStart(month, d+1).Sub(m.DayStart(month, d))) / float64(length)
			want := share * float64(len(ids))
			chi2 += (float64(n) - want) * (float64(n) - want) / want
		}
		// Critical values at p = 0.001: 59.70 for 30 degrees of freedom,
		// 55.48 for 27.
		critical := map[int]float64{31: 59.70, 28: 55.48}[days]
		require.Less(t, chi2, critical, "%s: days' counts %v", month.Month(), counts)
	}
}

// TestMonthlySchedule: a monthly schedule starts a cycle at local midnight
// of every month's first day, in summer and in winter, in a zone with DST
// (London: GMT in January, BST in June) and one without (UTC); Start is
// at or before t and Next after it.
func TestMonthlySchedule(t *testing.T) {
	t.Parallel()
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	_, err = NewMonthlySchedule(nil)
	require.ErrorContains(t, err, "time.UTC")
	for _, loc := range []*time.Location{london, time.UTC} {
		s, err := NewMonthlySchedule(loc)
		require.NoError(t, err)
		// 2027-03-31 23:30 UTC is 00:30 BST on 1 April in London.
		at := time.Date(2027, 3, 31, 23, 30, 0, 0, time.UTC)
		local := at.In(loc)
		want := time.Date(local.Year(), local.Month(), 1, 0, 0, 0, 0, loc)
		require.True(t, s.Start(at).Equal(want), "%s: %s", loc, s.Start(at))
		require.True(t, s.Next(at).Equal(time.Date(local.Year(), local.Month()+1, 1, 0, 0, 0, 0, loc)), "%s: %s", loc, s.Next(at))
		require.True(t, s.Start(want).Equal(want), "a month's start is its own cycle's start")
		require.True(t, s.Next(want.Add(-time.Nanosecond)).Equal(want), "and the next start of the instant before it")
		for c, n := s.Start(at), 0; n < 14; c, n = s.Next(c), n+1 {
			next := s.Next(c)
			require.True(t, next.After(c))
			l := next.In(loc)
			require.Equal(t, 1, l.Day(), "%s: %s", loc, l)
			require.Equal(t, 0, l.Hour()+l.Minute()+l.Second(), "%s: %s starts at midnight", loc, l)
		}
	}
	require.True(t, time.Date(2027, 4, 1, 0, 0, 0, 0, london).Equal(time.Date(2027, 3, 31, 23, 0, 0, 0, time.UTC)), "BST on 1 April")
}

// TestBucketDay: every account of a bucket is due on the day the bucket
// starts on, or (a bucket on the boundary of two days) on the next.
func TestBucketDay(t *testing.T) {
	t.Parallel()
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	m, err := NewMonthly(london)
	require.NoError(t, err)
	march := time.Date(2027, 3, 1, 0, 0, 0, 0, london)
	split := 0
	for _, id := range randomIDs(rand.New(rand.NewPCG(5, 6)), 20_000) {
		d, b := m.DayOf(march, 9, id), m.BucketDay(march, BucketOf(id, BucketsTwoByte))
		require.Contains(t, []int{b, b + 1}, d)
		if d != b {
			split++
		}
	}
	// About one bucket in 2,114 spans a day's end.
	require.Less(t, split, 40)
	require.Equal(t, 0, m.BucketDay(march, 0))
	require.Equal(t, 30, m.BucketDay(march, BucketsTwoByte-1))
}
