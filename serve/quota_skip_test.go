package serve_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// TestQuotaSkipIsNoCall: a call at its place that its tenant's quota
// cannot start within half a period is a missed entry tenant_quota, and
// its upstream's limiter learns nothing from it: the key's calls count
// only the requests the receiver got. Six schedules of 24 s under a quota
// of one call every 10 s cannot all be called within half a period of
// their places (six calls need 50 s; the last place plus half a period is
// at most 36 s after the first), so some are skipped. A skip that
// completed its job told the limiter that a call succeeded (counted as a
// call, and closing a half-open breaker with no call made).
func TestQuotaSkipIsNoCall(t *testing.T) {
	t.Parallel()
	const period = 24 * time.Second
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)
	ctx := context.Background()
	acme := a.tenant("acme", map[string]any{"max_calls_per_second": 1})
	as := a.as(acme.Token)
	target := &arrivals{at: map[string][]time.Time{}}
	ts := httptest.NewServer(target)
	t.Cleanup(ts.Close)
	var schedules []serve.Schedule
	for range 6 {
		schedules = append(schedules, as.schedule(map[string]any{"url": ts.URL + "/s/" + uuid.NewString(), "period": "24s", "timeout": "2s"}))
	}
	// Lowered below what the schedules plan (0.25 a second): creates would
	// be refused, the schedules stay, and the quota holds at run time.
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/tenants/"+acme.ID.String(), map[string]any{"max_calls_per_second": 0.1}, nil))
	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, a.srv.Configure(config, 10))
	riverslottest.StartClient(ctx, t, a.srv.Pool(), config)

	received := func() (n int) {
		target.mu.Lock()
		defer target.mu.Unlock()
		for _, at := range target.at {
			n += len(at)
		}
		return n
	}
	calls := pgx.Identifier{a.srv.Schema(), serve.CallsTable}.Sanitize()
	skipped := func() (n int64) {
		require.NoError(t, a.srv.Pool().QueryRow(ctx, "SELECT count(*) FROM "+calls+" WHERE missed = $1", serve.MissedQuota).Scan(&n))
		return n
	}
	riverslottest.WaitFor(t, 4*period, "calls skipped by the tenant's quota, and calls made", func() bool {
		return skipped() >= 2 && received() >= 2
	})
	upstreamTable := pgx.Identifier{a.srv.Schema(), "riverslot_upstream"}.Sanitize()
	counted := func() (n int64) {
		require.NoError(t, a.srv.Pool().QueryRow(ctx, "SELECT coalesce(sum(calls), 0) FROM "+upstreamTable+" WHERE task = $1 AND key = $2",
			serve.TaskName(period), schedules[0].Upstream).Scan(&n))
		return n
	}
	// A call is counted when it ends, after the receiver answered: the
	// count catches up with the requests, and never passes them.
	riverslottest.WaitFor(t, 10*time.Second, "the upstream's count of calls to reach the requests received", func() bool {
		return counted() >= int64(received())
	})
	c := counted()
	r := received()
	require.LessOrEqual(t, c, int64(r), "the upstream's limiter counted %d calls, the receiver got %d (%d skipped by the quota)", c, r, skipped())
}
