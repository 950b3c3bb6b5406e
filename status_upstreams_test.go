package riverslot_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/internal/upstream"
)

// TestStatusUpstreamsOfATaskWithoutLimits: the app's task has limits and
// its syncs left state in the limiter (an override, a 429's pause); a
// scheduler whose task is rebuilt from the ledger, without Upstream or
// Limits (as riverslot status and riverslot web build it), still shows
// them in Status, says that the task's own limits are unknown to it, and
// gives the override as the limit in force. The app's scheduler gives the
// task's Limits where no override is set.
func TestStatusUpstreamsOfATaskWithoutLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)
	newScheduler := func(limits riverslot.UpstreamLimits) *riverslot.Scheduler {
		s, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
			{Name: "transactions", Cycle: time.Hour, Schema: schema, Table: "accounts", Limits: limits, Sync: noopSync},
		}})
		require.NoError(t, err)
		require.NoError(t, s.Configure(&river.Config{Schema: schema}))
		return s
	}
	app := newScheduler(riverslot.UpstreamLimits{Rate: 5, Concurrency: 3})
	rebuilt := newScheduler(riverslot.UpstreamLimits{})
	info, err := app.Task("transactions")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, ledger.Table}.Sanitize()+" (task, cycle_start, plan, slot) VALUES ('transactions', $1, $2, -1)",
		info.Schedule.Start(time.Now()), info.PlanID)
	require.NoError(t, err)

	// An operator's override of bank-1's rate; a sync of bank-2 answered
	// 429 with Retry-After one hour.
	rate := 2.0
	require.NoError(t, app.SetUpstreamLimits(ctx, "transactions", "bank-1", riverslot.UpstreamOverride{Rate: &rate}))
	lim := upstream.New(schema)
	r := upstream.Request{Task: "transactions", Key: "bank-2", JobID: 1, Limits: upstream.Limits{Rate: 5, Concurrency: 3}.WithDefaults(), Hold: time.Minute}
	d, err := lim.Acquire(ctx, pool, r)
	require.NoError(t, err)
	require.Equal(t, upstream.Run, d.Verdict)
	_, err = lim.Release(ctx, pool, r, upstream.Throttled, time.Hour)
	require.NoError(t, err)
	var pausedUntil time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT paused_until FROM "+pgx.Identifier{schema, upstream.Table}.Sanitize()+" WHERE key = 'bank-2'").Scan(&pausedUntil))
	require.WithinDuration(t, time.Now().Add(time.Hour), pausedUntil, time.Minute)

	st, err := rebuilt.Status(ctx, "transactions")
	require.NoError(t, err)
	require.NotNil(t, st.Upstreams, "the limiter's upstreams of a task rebuilt without its limits")
	require.Equal(t, 2, st.Upstreams.Keys)
	require.True(t, st.Upstreams.TaskLimitsUnknown)
	require.Len(t, st.Upstreams.Top, 2)
	paused, overridden := st.Upstreams.Top[0], st.Upstreams.Top[1]
	require.Equal(t, "bank-2", paused.Key, "the paused upstream first")
	require.NotNil(t, paused.PausedUntil)
	require.True(t, paused.PausedUntil.Equal(pausedUntil), "paused until %s, want %s", paused.PausedUntil, pausedUntil)
	require.Nil(t, paused.Rate)
	require.Equal(t, "bank-1", overridden.Key)
	require.InDelta(t, 2.0, overridden.RateLimit, 0, "the override is in force")

	st, err = app.Status(ctx, "transactions")
	require.NoError(t, err)
	require.NotNil(t, st.Upstreams)
	require.False(t, st.Upstreams.TaskLimitsUnknown)
	require.Equal(t, "bank-2", st.Upstreams.Top[0].Key)
	require.InDelta(t, 5.0, st.Upstreams.Top[0].RateLimit, 0, "the task's rate without an override")
	require.Equal(t, 3, st.Upstreams.Top[0].ConcurrencyLimit)
	require.InDelta(t, 2.0, st.Upstreams.Top[1].RateLimit, 0)
	require.Equal(t, 3, st.Upstreams.Top[1].ConcurrencyLimit)
}
