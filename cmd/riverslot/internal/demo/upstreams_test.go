package demo

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMostAboveRate: the most calls in any window beyond the rate times its
// length, from the calls' times alone (the order they come in does not
// matter): calls exactly a rate's interval apart are 1 (each window holds
// one more call than its length's worth), a burst of B at once B, and
// calls 10% too close grow by a tenth per call, however long the run.
func TestMostAboveRate(t *testing.T) {
	t.Parallel()

	const rate = 10.0 // calls a second: 100 ms apart
	every := func(n int, gap time.Duration, from int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = from + int64(i)*int64(gap)
		}
		return out
	}
	require.Zero(t, mostAboveRate(nil, rate))
	require.Zero(t, mostAboveRate(every(5, 0, 0), 0), "no rate: nothing to be above")
	require.InDelta(t, 1, mostAboveRate(every(50, 100*time.Millisecond, 1e18), rate), 1e-6)
	require.InDelta(t, 1, mostAboveRate(every(50, 300*time.Millisecond, 1e18), rate), 1e-6, "slower than the rate")

	// A burst of 3 at once, then calls at the rate.
	times := append(every(3, 0, 1e18), every(20, 100*time.Millisecond, 1e18+int64(100*time.Millisecond))...)
	require.InDelta(t, 3, mostAboveRate(times, rate), 1e-6)

	// 30 calls 90 ms apart, given out of order: 1 + 29 x 0.1.
	times = every(30, 90*time.Millisecond, 1e18)
	times[0], times[29] = times[29], times[0]
	require.InDelta(t, 3.9, mostAboveRate(times, rate), 1e-6)
	// The same calls under a limit of 3 a second (burst and concurrency
	// aside): 30 - 3 x 2.61 s.
	require.InDelta(t, 30-3*2.61, mostAboveRate(times, 3), 1e-6)
}
