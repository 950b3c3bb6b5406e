package syncjob_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

func TestCountUnfinished(t *testing.T) {
	t.Parallel()

	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)

	// insert adds a job of kind in state with args as River writes them.
	insert := func(kind, state string, args syncjob.Args) {
		t.Helper()
		raw, err := json.Marshal(args)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+riverjob.QualifiedTable(schema)+
			" (kind, args, state, max_attempts, finalized_at) VALUES ($1, $2, $3, 25, CASE WHEN $4 THEN now() END)",
			kind, raw, state, slices.Contains([]string{"completed", "cancelled", "discarded"}, state))
		require.NoError(t, err)
	}
	// The syncs of task reports' cycle at start, one per state (two
	// running), and jobs that are not: another task's, another cycle's,
	// another kind's.
	for _, state := range []string{"scheduled", "available", "pending", "running", "running", "retryable", "completed", "discarded", "cancelled"} {
		insert(syncjob.Kind, state, syncjob.NewArgs("reports", uuid.New(), start, 0))
	}
	insert(syncjob.Kind, "available", syncjob.NewArgs("invoices", uuid.New(), start, 0))
	insert(syncjob.Kind, "available", syncjob.NewArgs("reports", uuid.New(), start.Add(time.Hour), 0))
	insert("other_kind", "available", syncjob.NewArgs("reports", uuid.New(), start, 0))

	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)

	for _, tt := range []struct {
		name       string
		cycleStart time.Time
		limit      int64
		want       syncjob.Unfinished // with no limit; with one, only its Total
	}{
		{name: "ByState", cycleStart: start, want: syncjob.Unfinished{Pending: 3, Running: 2, Retryable: 1}},
		// The args spell the cycle start in UTC, whatever zone asks.
		{name: "CycleStartInAnyZone", cycleStart: start.In(tokyo), want: syncjob.Unfinished{Pending: 3, Running: 2, Retryable: 1}},
		{name: "StopsAtLimit", cycleStart: start, limit: 4, want: syncjob.Unfinished{Pending: 4}},
		{name: "NoneLeft", cycleStart: start.Add(2 * time.Hour)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			u, err := syncjob.CountUnfinished(ctx, pool, schema, "reports", tt.cycleStart, tt.limit)
			require.NoError(t, err)
			require.Equal(t, tt.want.Total(), u.Total())
			if tt.limit == 0 {
				require.Equal(t, tt.want, u)
			}
		})
	}
}
