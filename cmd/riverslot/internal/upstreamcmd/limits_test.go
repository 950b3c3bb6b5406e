package upstreamcmd

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/internal/upstream"
)

// TestListShowsLimitsAndPauses: riverslot upstream list names the limits
// in force of each upstream (its overrides; "none" for an override that
// lifts a limit; "task default", explained, without one) and, while a
// 429's pause lasts, when it ends.
func TestListShowsLimitsAndPauses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	lim := upstream.New(schema)

	// bank-1: an operator set its rate and burst and lifted its
	// concurrency limit. bank-2: a sync answered 429, Retry-After one
	// hour. bank-3: a pause that has ended. bank-4: a burst of 0, which
	// the limiter takes as 1.
	rate, burst, concurrency := 2.5, 3, 0
	var out strings.Builder
	require.NoError(t, Set(ctx, pool, schema, "transactions", "bank-1", upstream.Override{Rate: &rate, Burst: &burst, Concurrency: &concurrency}, &out))
	zero := 0
	require.NoError(t, Set(ctx, pool, schema, "transactions", "bank-4", upstream.Override{Burst: &zero}, &out))
	throttle := func(key string, jobID int64, retryAfter time.Duration) {
		r := upstream.Request{Task: "transactions", Key: key, JobID: jobID, Limits: upstream.Limits{Rate: 5}.WithDefaults(), Hold: time.Minute}
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

	out.Reset()
	require.NoError(t, List(ctx, &ListConfig{Pool: pool, Schema: schema, Task: "transactions", Limit: 100}, &out))
	text := out.String()
	require.Regexp(t, `(?m)^TASK\s+KEY\s+RATE/S\s+BURST\s+CONCURRENCY\s+BREAKER\s+PAUSED UNTIL\s+IN FLIGHT\s+WAITING\s+CALLS\s`, text)
	require.Regexp(t, `(?m)^transactions\s+"bank-1"\s+2\.5\s+3\s+none\s+closed\s+-\s+0\s+0\s+0\s`, text)
	require.Regexp(t, `(?m)^transactions\s+"bank-2"\s+task default\s+task default\s+task default\s+closed\s+`+
		regexp.QuoteMeta(pausedUntil.UTC().Format(time.RFC3339))+`\s+0\s+0\s+1\s`, text)
	require.Regexp(t, `(?m)^transactions\s+"bank-3"\s+task default\s+task default\s+task default\s+closed\s+-\s+0\s+0\s+1\s`, text, "its pause ended")
	require.Regexp(t, `(?m)^transactions\s+"bank-4"\s+task default\s+1\s+task default\s+closed\s+-\s`, text)
	require.Contains(t, text, "task default: the key has no override; the task's Limits apply, as the app sets them (not known here")
	require.NotContains(t, text, "(more:")
}
