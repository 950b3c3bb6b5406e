package serve_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// arrivals is a loopback target that records when each schedule's calls
// arrive (its path is /s/<schedule id>); /fail/<id> always answers 500,
// /busy/<id> answers its first call 429 with Retry-After: 2.
type arrivals struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	_, id, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	a.mu.Lock()
	a.at[id] = append(a.at[id], now)
	n := len(a.at[id])
	a.mu.Unlock()
	switch {
	case strings.HasPrefix(r.URL.Path, "/fail/"):
		w.WriteHeader(http.StatusInternalServerError)
	case strings.HasPrefix(r.URL.Path, "/busy/") && n == 1:
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (a *arrivals) of(id uuid.UUID) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at[id.String()]...)
}

// TestCalls: schedules created over the API are called by a real River
// client through a real HTTP target on loopback, once per period, each at
// its own place in the period (the same place every period, never before
// it); a schedule deleted is never called again, and one paused at its
// creation is called only once resumed, at its place; a failing target
// gets a call and the schedule's one retry per period, a throttling one
// its next call no sooner than its Retry-After. The period is 24 s: 8
// slots of 3 s (16 s has 16 slots of 1 s, whose fan-outs River's 5 s
// scheduler tick makes late twice over).
func TestCalls(t *testing.T) {
	t.Parallel()
	const period = 24 * time.Second
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)
	target := &arrivals{at: map[string][]time.Time{}}
	ts := httptest.NewServer(target)
	t.Cleanup(ts.Close)

	create := func(paused bool) serve.Schedule {
		id := uuid.New() // only to name the path: the server gives the id
		var sc serve.Schedule
		require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": ts.URL + "/s/" + id.String(), "period": "24s", "timeout": "2s", "paused": true}, &sc))
		// Its path named by its own id, then resumed (or left paused).
		require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+sc.ID.String(), map[string]any{"url": ts.URL + "/s/" + sc.ID.String(), "paused": paused}, &sc))
		return sc
	}
	var live []serve.Schedule
	for range 12 {
		live = append(live, create(false))
	}
	doomed := create(false)
	later := create(true)
	// One whose target always fails (one retry), one whose target
	// throttles its first call (on an upstream of its own, so that its
	// pause holds no other schedule back).
	failing, busy := create(true), create(true)
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+failing.ID.String(), map[string]any{"url": ts.URL + "/fail/" + failing.ID.String(), "retries": 1, "paused": false}, &failing))
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+busy.ID.String(), map[string]any{"url": ts.URL + "/busy/" + busy.ID.String(), "upstream": "busy-host", "paused": false}, &busy))

	ctx := context.Background()
	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, a.srv.Configure(config, 20))
	riverslottest.StartClient(ctx, t, a.srv.Pool(), config)
	started := time.Now()

	// The doomed schedule's first call, then its deletion.
	riverslottest.WaitFor(t, 3*period, "the doomed schedule's first call", func() bool { return len(target.of(doomed.ID)) > 0 })
	require.Equal(t, http.StatusOK, a.do("DELETE", "/v1/schedules/"+doomed.ID.String(), nil, nil))
	deleted := time.Now()
	require.Empty(t, target.of(later.ID), "paused: never called")
	var resumed serve.Schedule
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+later.ID.String(), map[string]any{"paused": false}, &resumed))
	require.Equal(t, later.Offset, resumed.Offset)

	// Three calls of every schedule: its first and two periods after it
	// (three periods through a kill -9: integration_test's
	// TestServeProcesses).
	riverslottest.WaitFor(t, 8*period, "three calls of every schedule", func() bool {
		for _, sc := range append(live, resumed) {
			if len(target.of(sc.ID)) < 3 {
				return false
			}
		}
		return true
	})
	end := time.Now()
	var lateness []time.Duration
	for _, sc := range append(live, resumed) {
		calls := target.of(sc.ID)
		offset := time.Duration(sc.OffsetSeconds * float64(time.Second))
		seen := map[int64]int{}
		for _, at := range calls {
			// The period the call belongs to: the one whose place for the
			// schedule is the latest at or before the call.
			k := at.Add(-offset).Truncate(period)
			due := k.Add(offset)
			late := at.Sub(due)
			lateness = append(lateness, late)
			// Never before its place; after it by at most River's 5 s
			// scheduler tick (a sync job due later than its fan-out
			// waits for River to make it available) and a margin for a
			// busy machine, well inside the half period after which a
			// call is skipped as stale.
			require.True(t, late >= -50*time.Millisecond && late < period/2, "schedule %s: a call %s after its place (offset %s)", sc.ID, late, offset)
			seen[k.Unix()]++
		}
		for k, n := range seen {
			require.Equal(t, 1, n, "schedule %s: %d calls in the period starting %s", sc.ID, n, time.Unix(k, 0).UTC())
		}
		// Every period between its first and last call had its call.
		first, last := calls[0].Add(-offset).Truncate(period), calls[len(calls)-1].Add(-offset).Truncate(period)
		require.Equal(t, int(last.Sub(first)/period)+1, len(seen), "schedule %s: a period without its call", sc.ID)
	}
	for _, at := range target.of(doomed.ID) {
		require.False(t, at.After(deleted.Add(time.Second)), "the deleted schedule was called %s after its deletion", at.Sub(deleted))
	}
	slices.Sort(lateness)
	p50, p99 := lateness[len(lateness)/2], lateness[len(lateness)*99/100]
	t.Logf("%d schedules of %s called for %s: %d calls, lateness p50 %s, p99 %s", len(live)+1, period, end.Sub(started).Round(time.Second), len(lateness), p50, p99)
	require.Less(t, p50, 5*time.Second, "half the calls within River's scheduler tick")

	// The failing schedule: its call and one retry in each period, then
	// given up until the next; both in its history as failures.
	perPeriod := map[time.Time]int{}
	failingOffset := time.Duration(failing.OffsetSeconds * float64(time.Second))
	for _, at := range target.of(failing.ID) {
		perPeriod[at.Add(-failingOffset).Truncate(period)]++
	}
	checked := 0
	for k, n := range perPeriod {
		if k.Add(failingOffset + period/2).After(end) {
			require.LessOrEqual(t, n, 2, "the failing schedule's last period, whose retry may still come")
			continue
		}
		require.Equal(t, 2, n, "the failing schedule's period from %s: a call and one retry", k.UTC())
		checked++
	}
	require.Positive(t, checked)
	var failed serve.Schedule
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+failing.ID.String(), nil, &failed))
	attempts := map[int]bool{}
	for _, c := range failed.LastCalls {
		require.False(t, c.OK)
		require.Equal(t, http.StatusInternalServerError, *c.Status)
		attempts[c.Attempt] = true
	}
	require.Equal(t, map[int]bool{1: true, 2: true}, attempts)
	require.Equal(t, "failing", failed.Health.Status)
	require.GreaterOrEqual(t, failed.Health.RecentFailures, 2)
	// The throttled one: tried again no sooner than its Retry-After.
	b := target.of(busy.ID)
	require.GreaterOrEqual(t, len(b), 2)
	require.GreaterOrEqual(t, b[1].Sub(b[0]), 2*time.Second, "the second call waited for Retry-After")

	// The calls are in the history, with their lateness.
	var got serve.Schedule
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+live[0].ID.String(), nil, &got))
	require.GreaterOrEqual(t, len(got.LastCalls), 3)
	require.Equal(t, "ok", got.Health.Status)
	require.True(t, got.Health.LastCall.OK)
	require.Zero(t, got.Health.RecentFailures)
	for _, c := range got.LastCalls {
		require.True(t, c.OK)
		require.NotNil(t, c.Status)
		require.Equal(t, http.StatusNoContent, *c.Status)
	}
	var stats struct {
		Points []struct {
			Calls int64 `json:"calls"`
		} `json:"points"`
	}
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/stats?granularity=second", nil, &stats))
	var total int64
	for _, p := range stats.Points {
		total += p.Calls
	}
	require.Positive(t, total)
}
