package measure

import (
	"slices"
	"time"
)

// PeakPerSecond returns the most events in any one second: the largest
// number of times that lie within one second of the first of them (a
// sliding window, not calendar seconds). times are nanoseconds on any one
// clock (time.Time.UnixNano, or a simulation's clock), in any order; times
// is not modified. The demo's upstream servers and the simulator both report
// an upstream's busiest second with it.
func PeakPerSecond(times []int64) int {
	times = slices.Clone(times)
	slices.Sort(times)
	most, j := 0, 0
	for i := range times {
		for j < len(times) && times[j]-times[i] < int64(time.Second) {
			j++
		}
		most = max(most, j-i)
	}
	return most
}
