package inspect

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/internal/upstream"
)

// TestWriteStatusUpstreams: riverslot status and riverslot web rebuild a
// task from the ledger, without its Upstream or Limits; the status they
// write still shows the task's upstreams as the limiter holds them: an
// override as the limit in force, "task default" (said to be the app's,
// not known here) where none is set, and when a 429's pause ends, while
// it lasts.
func TestWriteStatusUpstreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)

	// The app's task, with limits, has made a cycle.
	limits := riverslot.UpstreamLimits{Rate: 5, Concurrency: 3}
	app, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: time.Hour, Schema: schema, Table: "accounts", Limits: limits,
		Sync: func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil },
	}}})
	require.NoError(t, err)
	require.NoError(t, app.Configure(&river.Config{Schema: schema}))
	info, err := app.Task("transactions")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, ledger.Table}.Sanitize()+" (task, cycle_start, plan, slot) VALUES ('transactions', $1, $2, -1)",
		info.Schedule.Start(time.Now()), info.PlanID)
	require.NoError(t, err)

	// bank-1: an operator's override of the rate and concurrency. bank-2:
	// a sync answered 429, Retry-After one hour. bank-3: a pause that
	// has ended.
	rate, concurrency := 2.0, 0
	require.NoError(t, app.SetUpstreamLimits(ctx, "transactions", "bank-1", riverslot.UpstreamOverride{Rate: &rate, Concurrency: &concurrency}))
	lim := upstream.New(schema)
	throttle := func(key string, jobID int64, retryAfter time.Duration) {
		r := upstream.Request{Task: "transactions", Key: key, JobID: jobID, Limits: upstream.Limits(limits).WithDefaults(), Hold: time.Minute}
		d, err := lim.Acquire(ctx, pool, r)
		require.NoError(t, err)
		require.Equal(t, upstream.Run, d.Verdict)
		_, err = lim.Release(ctx, pool, r, upstream.Throttled, retryAfter)
		require.NoError(t, err)
	}
	throttle("bank-2", 1, time.Hour)
	throttle("bank-3", 2, time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	var pausedUntil time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT paused_until FROM "+pgx.Identifier{schema, upstream.Table}.Sanitize()+" WHERE key = 'bank-2'").Scan(&pausedUntil))

	// The task as riverslot web finds it (its accounts table from the
	// flags), and the scheduler over it.
	tasks, err := FindTasks(ctx, pool, schema)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Zero(t, tasks[0].Limits)
	tasks[0].Schema, tasks[0].Table = schema, "accounts"
	s, err := Scheduler(pool, "", schema, tasks...)
	require.NoError(t, err)
	st, err := s.Status(ctx, "transactions")
	require.NoError(t, err)
	var sb strings.Builder
	WriteStatus(&sb, st)
	out := sb.String()

	require.Contains(t, out, "upstreams: 3, 0 with a breaker open or half-open")
	require.Contains(t, out, "limits without an override are the task's default (the app's Task.Limits, not known here)")
	line := func(key string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^  "` + key + `": .*$`).FindString(out)
		require.NotEmpty(t, m, "no line of %s in:\n%s", key, out)
		return m
	}
	require.Contains(t, line("bank-1"), "(rate limit 2/s)")
	require.Contains(t, line("bank-1"), "(concurrency limit none)")
	require.NotContains(t, line("bank-1"), "paused")
	require.Contains(t, line("bank-2"), "(rate limit task default)")
	require.Contains(t, line("bank-2"), "(concurrency limit task default)")
	require.True(t, strings.HasSuffix(line("bank-2"), "; paused (429) until "+pausedUntil.UTC().Format(time.RFC3339)), line("bank-2"))
	require.NotContains(t, line("bank-3"), "paused", "its pause ended")
}
