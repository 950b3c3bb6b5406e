package plancmd

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/slotplan"
)

// stuckSchedule is a cycle schedule whose Next returns next whatever it is
// asked: the zero time, or a time that does not advance.
type stuckSchedule struct{ start, next time.Time }

func (s stuckSchedule) Start(time.Time) time.Time { return s.start }
func (s stuckSchedule) Next(time.Time) time.Time  { return s.next }

func TestNextSyncsAlwaysFinishes(t *testing.T) {
	t.Parallel()

	plan, err := slotplan.New(24 * time.Hour)
	require.NoError(t, err)
	id := uuid.MustParse("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
	at := time.Date(2025, 3, 8, 6, 0, 0, 0, time.UTC)
	start := time.Date(2025, 3, 8, 5, 0, 0, 0, time.UTC)

	for _, tt := range []struct {
		name     string
		schedule stuckSchedule
		want     string
	}{
		{"ZeroStart", stuckSchedule{}, "returned 0001-01-01T00:00:00Z as the start of the cycle holding 2025-03-08T06:00:00Z"},
		{"StartAfterAt", stuckSchedule{start: at.Add(time.Hour), next: at.Add(2 * time.Hour)}, "as the start of the cycle holding"},
		{"ZeroNext", stuckSchedule{start: start}, "returned 0001-01-01T00:00:00Z as the first cycle start after"},
		{"NextDoesNotAdvance", stuckSchedule{start: start, next: at.Add(time.Minute)}, "returned 2025-03-08T06:01:00Z as the first cycle start after 2025-03-08T06:01:00Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			syncs, err := nextSyncs(context.Background(), tt.schedule, plan, 1, 0, id, at, 3)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, "this is a bug in riverslot's slotplan")
			require.Nil(t, syncs)
		})
	}

	t.Run("Interrupted", func(t *testing.T) {
		t.Parallel()

		schedule, err := slotplan.NewSchedule(24*time.Hour, 0, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = nextSyncs(ctx, schedule, plan, 1, 0, id, at, 3)
		require.ErrorIs(t, err, ErrInterrupted)
	})
}
