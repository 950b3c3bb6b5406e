package serve_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// answering is a loopback target that answers every call with answer's
// result for the call's path and how many calls the path had before.
type answering struct {
	mu     sync.Mutex
	at     map[string][]time.Time
	answer func(path string, n int, w http.ResponseWriter)
}

func newAnswering(t *testing.T, answer func(path string, n int, w http.ResponseWriter)) (*answering, string) {
	a := &answering{at: map[string][]time.Time{}, answer: answer}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		n := len(a.at[r.URL.Path])
		a.at[r.URL.Path] = append(a.at[r.URL.Path], time.Now())
		a.mu.Unlock()
		a.answer(r.URL.Path, n, w)
	}))
	t.Cleanup(ts.Close)
	return a, ts.URL
}

func (a *answering) calls(path string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at[path]...)
}

// TestThrottleGoneAndPorts: a 429 from one service pauses only the
// schedules of that service (host and port) and tenant, for at most half
// the period whatever its Retry-After; another service on the same host,
// and another tenant's schedule on the same host and port whose places
// fall inside the pause, keep their places. The throttled call's retry,
// held past the time it could be made, is a history entry
// upstream_paused. A 503 with Retry-After is a throttle too, tried again after it
// when the schedule has retries left (a 429 or 503 counts as a call: with
// retries 0, one call a period); a 410 Gone pauses its schedule, which is
// then called no more.
func TestThrottleGoneAndPorts(t *testing.T) {
	t.Parallel()
	const period = 24 * time.Second
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)

	// Service 1 throttles every call for an hour.
	throttler, url1 := newAnswering(t, func(path string, _ int, w http.ResponseWriter) {
		if path == "/other" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	// Service 2, the same host on another port: fine, except /unavailable
	// (503 with Retry-After: 2 once) and /gone (410).
	svc2, url2 := newAnswering(t, func(path string, n int, w http.ResponseWriter) {
		switch {
		case (path == "/unavailable" || path == "/unavailable1") && n == 0:
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
		case path == "/gone":
			w.WriteHeader(http.StatusGone)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	require.Equal(t, strings.Split(url1, ":")[1], strings.Split(url2, ":")[1], "one host")

	create := func(url string, retries int) serve.Schedule {
		var sc serve.Schedule
		require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": url, "period": "24s", "timeout": "2s", "retries": retries}, &sc))
		return sc
	}
	throttled := create(url1+"/t", 3)
	// Another tenant's schedule on the throttled host and port (answered
	// 204, /other), whose place comes just after the throttled one's: the
	// first tenant's pause, 12 s from its call, would hold it 8 s or more.
	other := a.tenant("other", nil)
	var theirs serve.Schedule
	for i := 0; ; i++ {
		require.Less(t, i, 300, "a place just after the throttled schedule's")
		var sc serve.Schedule
		require.Equal(t, http.StatusCreated, a.as(other.Token).do("POST", "/v1/schedules", map[string]any{"url": url1 + "/other", "period": "24s", "timeout": "2s"}, &sc))
		after := time.Duration((sc.OffsetSeconds - throttled.OffsetSeconds) * float64(time.Second))
		if after < 0 {
			after += period
		}
		if after > 500*time.Millisecond && after < 4*time.Second {
			theirs = sc
			break
		}
		require.Equal(t, http.StatusOK, a.as(other.Token).do("DELETE", "/v1/schedules/"+sc.ID.String(), nil, nil))
	}
	require.NotEqual(t, throttled.Upstream, theirs.Upstream, "one host and port, two tenants, two upstreams")
	var fine []serve.Schedule
	for i := range 6 {
		fine = append(fine, create(url2+"/fine"+string(rune('a'+i)), 3))
	}
	create(url2+"/unavailable", 0)
	create(url2+"/unavailable1", 1)
	gone := create(url2+"/gone", 3)
	require.NotEqual(t, throttled.Upstream, fine[0].Upstream, "two ports, two upstreams")

	ctx := context.Background()
	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, a.srv.Configure(config, 10))
	riverslottest.StartClient(ctx, t, a.srv.Pool(), config)

	riverslottest.WaitFor(t, 4*period, "two calls of every schedule of service 2, the throttled one twice", func() bool {
		for _, sc := range fine {
			if len(svc2.calls("/fine"+sc.URL[len(sc.URL)-1:])) < 2 {
				return false
			}
		}
		return len(svc2.calls("/unavailable")) >= 2 && len(svc2.calls("/unavailable1")) >= 2 && len(throttler.calls("/t")) >= 2 && len(throttler.calls("/other")) >= 2
	})

	// Service 2's schedules kept one call per period at their places:
	// never held behind service 1's throttle.
	for _, sc := range fine {
		calls := svc2.calls("/fine" + sc.URL[len(sc.URL)-1:])
		offset := time.Duration(sc.OffsetSeconds * float64(time.Second))
		for _, at := range calls {
			due := at.Add(-offset).Truncate(period).Add(offset)
			require.Less(t, at.Sub(due), period/2, "schedule %s called %s after its place", sc.ID, at.Sub(due))
		}
	}
	// Service 1's Retry-After of an hour was held to half the period: its
	// schedule's next period was called at its place (with an hour, not
	// for an hour). Its throttled retry waited half the period, by then
	// stale (the next period's call covers it).
	tc := throttler.calls("/t")
	offset := time.Duration(throttled.OffsetSeconds * float64(time.Second))
	for _, at := range tc {
		due := at.Add(-offset).Truncate(period).Add(offset)
		require.Less(t, at.Sub(due), period/2, "the throttled schedule called %s after its place", at.Sub(due))
	}
	require.GreaterOrEqual(t, tc[1].Sub(tc[0]), period/2, "the throttle held its upstream")
	// The other tenant's calls on that host and port came at their places,
	// inside the first tenant's pause: never held by it.
	theirOffset := time.Duration(theirs.OffsetSeconds * float64(time.Second))
	for _, at := range throttler.calls("/other") {
		due := at.Add(-theirOffset).Truncate(period).Add(theirOffset)
		require.Less(t, at.Sub(due), 5*time.Second, "the other tenant's call %s after its place, held by the first tenant's 429", at.Sub(due))
	}
	// The throttled schedule's retry, held by its upstream's pause past
	// the time it could still be made: a history entry upstream_paused.
	riverslottest.WaitFor(t, period, "the throttled schedule's entry upstream_paused", func() bool {
		var got serve.Schedule
		require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+throttled.ID.String(), nil, &got))
		for _, c := range got.LastCalls {
			if c.Missed != nil && *c.Missed == serve.MissedUpstreamPaused {
				return true
			}
		}
		return false
	})
	// The 503 with Retry-After counts against retries: with none, the
	// period made one call (the next is the next period's, at its place);
	// with one, it was tried again after the Retry-After, in its period.
	uc := svc2.calls("/unavailable")
	require.Greater(t, uc[1].Sub(uc[0]), period/2, "retries 0: one call a period, a 503 or 429 included")
	uc1 := svc2.calls("/unavailable1")
	require.GreaterOrEqual(t, uc1[1].Sub(uc1[0]), 2*time.Second)
	require.Less(t, uc1[1].Sub(uc1[0]), period/2, "retries 1: tried again in its period after the Retry-After")
	// The 410: called once, then paused.
	require.Len(t, svc2.calls("/gone"), 1)
	var got serve.Schedule
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+gone.ID.String(), nil, &got))
	require.True(t, got.Paused, "a 410 pauses its schedule")
	require.NotNil(t, got.PausedReason)
	require.Equal(t, serve.PausedGone, *got.PausedReason, "and says why")
	require.NotEmpty(t, got.LastCalls)
	require.Equal(t, http.StatusGone, *got.LastCalls[0].Status)
}

// TestMigrateFromBeforeTenants: a schema of the version before tenants
// (schedules without a tenant, keys without their port or tenant, tokens
// without a scope) is brought up to date: its schedules are the default
// tenant's, counted in its use; each key names the tenant, the URL's
// scheme, host and port (the scheme's default when the URL names none)
// and keeps its sub-key; its tokens are admin tokens; a second Migrate
// changes nothing. And a key the limiter would cut (over
// upstream.MaxKeyLen bytes) is refused with the field that made it.
func TestMigrateFromBeforeTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	require.NoError(t, riverslot.Migrate(ctx, pool, schema))
	table := pgx.Identifier{schema, serve.SchedulesTable}.Sanitize()
	tokens := pgx.Identifier{schema, serve.TokensTable}.Sanitize()
	for _, q := range []string{
		`CREATE TABLE ` + table + ` (id uuid PRIMARY KEY, url text NOT NULL, method text NOT NULL, headers jsonb NOT NULL DEFAULT '{}', body text NOT NULL DEFAULT '',
	period_ms bigint NOT NULL, timeout_ms int NOT NULL, retries int NOT NULL, upstream text NOT NULL, paused boolean NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL DEFAULT clock_timestamp(), updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), deleted_at timestamptz)`,
		`CREATE TABLE ` + tokens + ` (id bigint GENERATED ALWAYS AS IDENTITY UNIQUE, hash bytea PRIMARY KEY, name text NOT NULL DEFAULT '', created_at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	old := map[string][2]string{ // url → key before, key after (after the tenant)
		"https://API.example.com/hook":   {"api.example.com", "https://api.example.com:443"},
		"http://api.example.com:8080/x":  {"api.example.com/tenant-1", "http://api.example.com:8080/tenant-1"},
		"http://[2001:db8::1]/y":         {"2001:db8::1", "http://[2001:db8::1]:80"},
		"https://fresh.example.com:9443": {"fresh.example.com:9443", "https://fresh.example.com:9443"},
	}
	ids := map[string]uuid.UUID{}
	for url, k := range old {
		id := uuid.New()
		ids[url] = id
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (id, url, method, period_ms, timeout_ms, retries, upstream) VALUES ($1, $2, 'POST', 60000, 10000, 3, $3)`, id, url, k[0])
		require.NoError(t, err)
	}
	const oldToken = "rs_0123456789abcdef0123456789abcdef"
	sum := sha256.Sum256([]byte(oldToken))
	_, err := pool.Exec(ctx, `INSERT INTO `+tokens+` (hash, name) VALUES ($1, 'ci')`, sum[:])
	require.NoError(t, err)

	var def uuid.UUID
	for range 2 {
		require.NoError(t, serve.Migrate(ctx, pool, schema))
		require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM `+pgx.Identifier{schema, serve.TenantsTable}.Sanitize()+` WHERE name = 'default'`).Scan(&def))
		for url, k := range old {
			var (
				got    string
				tenant uuid.UUID
			)
			require.NoError(t, pool.QueryRow(ctx, `SELECT upstream, tenant_id FROM `+table+` WHERE id = $1`, ids[url]).Scan(&got, &tenant))
			require.Equal(t, def.String()+" "+k[1], got, url)
			require.Equal(t, def, tenant)
		}
	}
	srv, err := serve.New(serve.Config{Pool: pool, Schema: schema, Periods: []time.Duration{time.Minute, time.Hour}, Guard: &serve.Guard{AllowPrivate: true}, Logger: riverslottest.Logger(t)})
	require.NoError(t, err)
	a := &api{t: t, srv: srv, http: newHTTP(t, srv), token: oldToken}
	var me struct {
		Scope serve.Scope `json:"scope"`
	}
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/me", nil, &me))
	require.Equal(t, serve.ScopeAdmin, me.Scope, "a token of before tenants is an admin's")
	var tenant serve.Tenant
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/tenants/"+def.String(), nil, &tenant))
	require.EqualValues(t, 4, tenant.Schedules)
	require.InDelta(t, 4.0/60, tenant.PlannedCallsPerSecond, 1e-6)
	require.Zero(t, tenant.MaxSchedules, "the default tenant has no quota")

	var e apiErr
	long := "https://" + strings.Repeat("a", 40) + "." + strings.Repeat("b", 10) + ".example/"
	require.Equal(t, http.StatusBadRequest, a.do("POST", "/v1/schedules", map[string]any{"url": long, "period": "1h", "upstream": strings.Repeat("s", 40)}, &e))
	require.Equal(t, "upstream", e.Field, e.Error)
	// The host name itself as the sub-key is the host's own key.
	var sc serve.Schedule
	require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": "https://203.0.113.10/hook", "period": "1h", "upstream": "203.0.113.10"}, &sc))
	require.Equal(t, def.String()+" https://203.0.113.10:443", sc.Upstream)
}
