package serve_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// TestQuotaAtRunTime: a tenant's max_calls_per_second holds at run time
// for every call its schedules make, and every call goes through its
// upstream key's limiter. With a quota of 0.5 calls a second (a start
// every 2 s), a trigger while the quota is taken answers 429 naming the
// quota, with Retry-After, and is accepted once the quota has room; a
// retry and two catch-up calls queued at once wait their turn, none
// dropped: the receiver gets every call, the quota's clock spaces their
// starts 2 s apart. The
// limiter's rows count each call the receiver got, under the tenant's key
// and under the schedules' upstream key.
func TestQuotaAtRunTime(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{AllowPrivate: true}, 24*time.Hour)
	ctx := context.Background()
	// One start every 5 s: B's trigger right after A's must find the
	// quota taken (at one every 2 s a CI run under -race, two packages at
	// once, took longer between the two requests and B got 202).
	const interval = 5 * time.Second
	acme := a.tenant("acme", map[string]any{"max_calls_per_second": 1 / interval.Seconds()})
	as := a.as(acme.Token)

	type arrival struct {
		path string
		at   time.Time
	}
	var (
		mu    sync.Mutex
		calls []arrival
	)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		first := !slices.ContainsFunc(calls, func(c arrival) bool { return c.path == r.URL.Path })
		calls = append(calls, arrival{r.URL.Path, time.Now()})
		if r.URL.Path == "/a" && first {
			w.WriteHeader(http.StatusInternalServerError) // A's first call fails: retried
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(ts.Close)
	count := func(path string) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range calls {
			if path == "" || c.path == path {
				n++
			}
		}
		return n
	}
	// Schedules of 24 h, made mid-period: no call at a place during the
	// test (the first period is the next one).
	sc := map[string]serve.Schedule{}
	for _, p := range []string{"a", "b", "c", "d"} {
		sc[p] = as.schedule(map[string]any{"url": ts.URL + "/" + p, "period": "24h", "timeout": "2s", "retries": 1})
	}
	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, a.srv.Configure(config, 10))
	client, _ := riverslottest.StartClient(ctx, t, a.srv.Pool(), config)

	t0 := time.Now()
	require.Equal(t, http.StatusAccepted, as.do("POST", "/v1/schedules/"+sc["a"].ID.String()+"/trigger", nil, nil))
	// The quota's start is A's for 5 s: B is refused, the quota named.
	req, err := http.NewRequest("POST", a.http.URL+"/v1/schedules/"+sc["b"].ID.String()+"/trigger", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+acme.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	var e struct {
		Quota string `json:"quota"`
	}
	require.Equal(t, http.StatusTooManyRequests, as.do("POST", "/v1/schedules/"+sc["b"].ID.String()+"/trigger", nil, &e))
	require.Equal(t, "max_calls_per_second", e.Quota)

	// Two catch-up calls queued at once (as RecordMissed queues them).
	yesterday := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	for _, p := range []string{"c", "d"} {
		_, err := client.Insert(ctx, serve.TriggerArgs{Schedule: sc[p].ID, At: time.Now().UTC(), Period: yesterday}, &river.InsertOpts{Queue: "riverslot_calls"})
		require.NoError(t, err)
	}
	riverslottest.WaitFor(t, 60*time.Second, "A's call and its retry, and both catch-ups", func() bool {
		return count("/a") == 2 && count("/c") == 1 && count("/d") == 1
	})
	// B, asked for again until the quota has room.
	riverslottest.WaitFor(t, 30*time.Second, "B's trigger accepted", func() bool {
		return as.do("POST", "/v1/schedules/"+sc["b"].ID.String()+"/trigger", nil, nil) == http.StatusAccepted
	})
	riverslottest.WaitFor(t, 20*time.Second, "B's call", func() bool { return count("/b") == 1 })

	mu.Lock()
	got := slices.Clone(calls)
	mu.Unlock()
	require.Len(t, got, 5, "every call made once: A twice (its retry), B, C and D")
	slices.SortFunc(got, func(x, y arrival) int { return x.at.Compare(y.at) })
	// The quota's clock: each of the 5 starts moved its next free start an
	// interval past the later of itself and the one before, so the five,
	// the first no sooner than t0, leave it at least 5 intervals after t0
	// (4: one start's slack). A machine's lag only makes starts later. At
	// the receiver the calls then span at least 2 intervals (the first
	// call's lag after its start can only shorten the span it saw); all at
	// once, they would not.
	upstreamTable := pgx.Identifier{a.srv.Schema(), "riverslot_upstream"}.Sanitize()
	var startTAT time.Time
	require.NoError(t, a.srv.Pool().QueryRow(ctx, `SELECT start_tat FROM `+upstreamTable+` WHERE task = $1 AND key = $2`, serve.QuotaTask, acme.ID.String()).Scan(&startTAT))
	require.False(t, startTAT.Before(t0.Add(4*interval)), "the quota's next start %s, %s after the first trigger: five starts %s apart", startTAT, startTAT.Sub(t0), interval)
	require.GreaterOrEqual(t, got[len(got)-1].at.Sub(got[0].at), 2*interval, "the tenant's quota spaces its calls: %v", got)
	// The limiter's counts, each written as its call ends (after the
	// receiver answered).
	limiterCalls := func(task, key string) (n int64) {
		require.NoError(t, a.srv.Pool().QueryRow(ctx, `SELECT coalesce(sum(calls), 0) FROM `+upstreamTable+` WHERE task = $1 AND key = $2`, task, key).Scan(&n))
		return n
	}
	riverslottest.WaitFor(t, 10*time.Second, "every call counted under the tenant's quota and its upstream key's limits", func() bool {
		return limiterCalls(serve.QuotaTask, acme.ID.String()) >= 5 && limiterCalls(serve.TaskName(24*time.Hour), sc["a"].Upstream) >= 5
	})
	require.EqualValues(t, 5, limiterCalls(serve.QuotaTask, acme.ID.String()), "every call under the tenant's quota, once")
	require.EqualValues(t, 5, limiterCalls(serve.TaskName(24*time.Hour), sc["a"].Upstream), "every call under its upstream key's limits, once")
	require.Equal(t, 5, count(""), "and no call more")
}
