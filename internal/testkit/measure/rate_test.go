package measure

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPeakPerSecond(t *testing.T) {
	t.Parallel()

	const s = int64(time.Second)

	for _, tt := range []struct {
		name  string
		times []int64
		want  int
	}{
		{name: "Empty", times: nil, want: 0},
		{name: "One", times: []int64{42}, want: 1},
		{name: "SameInstant", times: []int64{5, 5, 5}, want: 3},
		// A window is one second wide: an event exactly one second after
		// the first falls in the next window.
		{name: "OneSecondApart", times: []int64{0, s}, want: 1},
		{name: "JustUnderOneSecond", times: []int64{0, s - 1}, want: 2},
		// Sliding, not calendar seconds: 0.6 s to 1.4 s straddles a
		// second boundary and still counts as one second's events.
		{name: "StraddlesASecondBoundary", times: []int64{s / 10, 6 * s / 10, 9 * s / 10, 12 * s / 10, 14 * s / 10, 25 * s / 10}, want: 4},
		{name: "Unsorted", times: []int64{3 * s, 0, 3*s + 1, s / 2, 3*s + 2}, want: 3},
		{name: "Negative", times: []int64{-s / 2, -s / 4, 0, s / 4}, want: 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			in := append([]int64(nil), tt.times...)
			require.Equal(t, tt.want, PeakPerSecond(tt.times))
			require.Equal(t, in, tt.times, "PeakPerSecond must not reorder its input")
		})
	}
}
