package slotplan

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSchedule(t *testing.T) {
	t.Parallel()

	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)

	t.Run("AbsoluteGrid", func(t *testing.T) {
		t.Parallel()

		s, err := NewSchedule(120*time.Second, 0, nil)
		require.NoError(t, err)

		at := time.Date(2026, 11, 22, 10, 3, 59, 0, time.UTC)
		require.Equal(t, time.Date(2026, 11, 22, 10, 2, 0, 0, time.UTC), s.Start(at))
		require.Equal(t, time.Date(2026, 11, 22, 10, 4, 0, 0, time.UTC), s.Next(at))

		// A start is its own cycle's start; Next is strictly after.
		start := time.Date(2026, 11, 22, 10, 4, 0, 0, time.UTC)
		require.Equal(t, start, s.Start(start))
		require.Equal(t, start.Add(120*time.Second), s.Next(start))

		// Before the epoch the grid still floors.
		pre := time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)
		require.Equal(t, time.Date(1969, 12, 31, 23, 58, 0, 0, time.UTC), s.Start(pre))
	})

	t.Run("AbsoluteGridWithOffset", func(t *testing.T) {
		t.Parallel()

		s, err := NewSchedule(8*time.Hour, 30*time.Minute, nil)
		require.NoError(t, err)
		at := time.Date(2026, 11, 22, 8, 29, 0, 0, time.UTC)
		require.Equal(t, time.Date(2026, 11, 22, 0, 30, 0, 0, time.UTC), s.Start(at))
		require.Equal(t, time.Date(2026, 11, 22, 8, 30, 0, 0, time.UTC), s.Next(at))
	})

	t.Run("LondonWallClockAcrossDST", func(t *testing.T) {
		t.Parallel()

		s, err := NewSchedule(24*time.Hour, 30*time.Minute, london)
		require.NoError(t, err)

		// Winter: 00:30 GMT is 00:30 UTC.
		require.Equal(t, time.Date(2026, 1, 15, 0, 30, 0, 0, time.UTC), s.Start(time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)).UTC())
		// Summer: 00:30 BST is 23:30 UTC the day before.
		require.Equal(t, time.Date(2026, 6, 30, 23, 30, 0, 0, time.UTC), s.Start(time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)).UTC())

		// Spring forward on 2026-03-29 (01:00 UTC): the cycle from the 29th
		// to the 30th is 23h long in absolute time.
		spring := s.Next(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC))
		require.Equal(t, time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC), spring.UTC())
		require.Equal(t, 23*time.Hour, s.Next(spring).Sub(spring))

		// Fall back on 2026-10-25: that cycle is 25h long.
		autumn := s.Next(time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC))
		require.Equal(t, time.Date(2026, 10, 24, 23, 30, 0, 0, time.UTC), autumn.UTC())
		require.Equal(t, 25*time.Hour, s.Next(autumn).Sub(autumn))
	})

	t.Run("Invariants", func(t *testing.T) {
		t.Parallel()

		rng := rand.New(rand.NewPCG(3, 4))
		for _, s := range []Schedule{
			{Cycle: 120 * time.Second},
			{Cycle: 24 * time.Hour, Offset: 30 * time.Minute, Location: london},
			{Cycle: 8 * time.Hour, Offset: time.Hour, Location: london},
		} {
			for range 2000 {
				at := time.Unix(1_700_000_000+rng.Int64N(200_000_000), rng.Int64N(1e9))
				start, next := s.Start(at), s.Next(at)
				require.False(t, start.After(at), "start %s after %s", start, at)
				require.True(t, next.After(at), "next %s not after %s", next, at)
				require.Equal(t, start, s.Start(start))
				require.Equal(t, next, s.Start(next))
				require.Equal(t, next, s.Next(start), "no start between %s and %s", start, next)
			}
		}
	})

	t.Run("Rejected", func(t *testing.T) {
		t.Parallel()

		_, err := NewSchedule(120*time.Second, 120*time.Second, nil)
		require.EqualError(t, err, "TriggerOffset must be in [0, Cycle) = [0, 2m0s), got 2m0s; it shifts the first cycle start after midnight (or after the Unix epoch without a location)")
		_, err = NewSchedule(120*time.Second, -time.Second, nil)
		require.ErrorContains(t, err, "TriggerOffset must be in [0, Cycle)")
		_, err = NewSchedule(256*time.Second, 0, london)
		require.ErrorContains(t, err, "Cycle must divide 24h when Location is set")
		_, err = NewSchedule(3*time.Second, 0, nil)
		require.ErrorIs(t, err, ErrInvalidCycle)
	})
}
