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
