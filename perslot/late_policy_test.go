package perslot

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

func TestLatePolicyValidate(t *testing.T) {
	t.Parallel()

	require.NoError(t, LatePolicySpread.Validate())
	require.NoError(t, LatePolicySkip.Validate())
	require.EqualError(t, LatePolicy("").Validate(), `LatePolicy must be "spread" or "skip", got ""`)
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
