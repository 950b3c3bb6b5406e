package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

func TestMain(m *testing.M) { riverslottest.RunTests(m) }

// countingListener is a loopback server that counts the connections it
// accepts and the requests it answers.
type countingListener struct {
	url             string
	conns, requests atomic.Int64
	status          atomic.Int64
	server          *httptest.Server
}

func newTarget(t *testing.T) *countingListener {
	t.Helper()
	c := &countingListener{}
	c.status.Store(http.StatusOK)
	c.server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c.requests.Add(1)
		w.WriteHeader(int(c.status.Load()))
	}))
	c.server.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	c.server.Start()
	t.Cleanup(c.server.Close)
	c.url = c.server.URL
	return c
}

type api struct {
	t     *testing.T
	srv   *serve.Server
	http  *httptest.Server
	token string
}

func setup(t *testing.T, guard *serve.Guard, periods ...time.Duration) *api {
	t.Helper()
	return setupConfig(t, serve.Config{Periods: periods, Guard: guard})
}

// setupConfig is setup for a server of cfg (its pool, schema and logger
// set here).
func setupConfig(t *testing.T, cfg serve.Config) *api {
	t.Helper()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	require.NoError(t, serve.Migrate(ctx, pool, schema))
	cfg.Pool, cfg.Schema, cfg.Logger = pool, schema, riverslottest.Logger(t)
	srv, err := serve.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.CreateIndexes(ctx))
	token, err := srv.AddToken(ctx, "test")
	require.NoError(t, err)
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)
	return &api{t: t, srv: srv, http: h, token: token}
}

// do sends a request with the API's token and decodes the answer into out
// (when not nil); it returns the status.
func (a *api) do(method, path string, body any, out any) int {
	a.t.Helper()
	return a.doWith(method, path, body, out, nil)
}

// doWith is do with the request's headers set too.
func (a *api) doWith(method, path string, body, out any, headers map[string]string) int {
	a.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(a.t, err)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, a.http.URL+path, rd)
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(a.t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

type apiErr struct {
	Field string `json:"field"`
	Error string `json:"error"`
}

// TestGuard: loopback, private, link-local (the cloud metadata address),
// carrier-grade NAT and unspecified addresses are refused, public ones
// are not; a URL naming one is refused without a connection, and so is a
// call that would connect to one.
func TestGuard(t *testing.T) {
	t.Parallel()
	g := &serve.Guard{}
	for _, tt := range []struct {
		url     string
		private bool
	}{
		{"http://127.0.0.1:8080/", true},
		{"http://10.1.2.3/", true},
		{"http://192.168.0.1/", true},
		{"http://172.16.5.4/", true},
		{"http://169.254.169.254/latest/meta-data/", true},
		{"http://100.64.0.1/", true},
		{"http://0.0.0.0/", true},
		{"http://[::1]/", true},
		{"http://[fe80::1]/", true},
		{"http://[fd00::1]/", true},
		{"http://[::ffff:127.0.0.1]/", true},
		{"http://localhost:9000/", true},
		{"http://api.localhost/", true},
		{"http://[::7f00:1]/", true},          // IPv4-compatible 127.0.0.1
		{"http://[2002:a00:1::]/", true},      // 6to4 of 10.0.0.1
		{"http://[64:ff9b::a00:1]/", true},    // NAT64 of 10.0.0.1
		{"http://[64:ff9b::808:808]/", false}, // NAT64 of 8.8.8.8
		{"http://[2001:0:4136:e378::1]/", true},
		{"http://8.8.8.8/", false},
		{"https://[2001:4860:4860::8888]/", false},
	} {
		_, err := g.CheckURL(context.Background(), tt.url)
		if tt.private {
			require.ErrorIs(t, err, serve.ErrPrivateTarget, tt.url)
		} else {
			require.NoError(t, err, tt.url)
		}
	}
	for _, bad := range []string{"ftp://example.com/", "http:///path", "https://user:pw@example.com/", "::"} {
		_, err := g.CheckURL(context.Background(), bad)
		require.Error(t, err, bad)
		require.NotErrorIs(t, err, serve.ErrPrivateTarget, bad)
	}
	// The dialer's check: an address is refused before the connection.
	require.ErrorIs(t, g.Control("tcp4", "127.0.0.1:80", nil), serve.ErrPrivateTarget)
	require.ErrorIs(t, g.Control("tcp6", "[::1]:443", nil), serve.ErrPrivateTarget)
	require.NoError(t, g.Control("tcp4", netip.MustParseAddrPort("8.8.8.8:443").String(), nil))
	require.NoError(t, (&serve.Guard{AllowPrivate: true}).Control("tcp4", "127.0.0.1:80", nil))
	// This machine's own addresses, public ones too.
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		require.NoError(t, err)
		require.ErrorIs(t, g.Control("tcp", netip.AddrPortFrom(p.Addr(), 443).String(), nil), serve.ErrPrivateTarget, p.Addr())
	}
}

// TestAPI: every endpoint needs a token; a schedule is created with its
// place in the period and its next calls, one period apart; bad input is
// refused naming the field (a loopback target without a connection to
// it); lists page through every schedule once; pausing empties the next
// calls and resuming keeps the place; a deleted schedule stays readable
// and leaves the list.
func TestAPI(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{}, time.Minute, time.Hour)
	target := newTarget(t)

	// No token, a wrong token: 401; the OpenAPI document needs none.
	resp, err := http.Get(a.http.URL + "/v1/schedules")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	good := a.token
	a.token = "rs_wrong"
	require.Equal(t, http.StatusUnauthorized, a.do("GET", "/v1/schedules", nil, nil))
	a.token = good
	resp, err = http.Get(a.http.URL + "/v1/openapi.json")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	resp.Body.Close()
	require.Equal(t, "3.1.0", doc["openapi"])
	// The operator's page needs no token to load (it asks for one), and
	// renders nothing as markup.
	resp, err = http.Get(a.http.URL + "/v1/page")
	require.NoError(t, err)
	html, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, serve.PageCSP, resp.Header.Get("Content-Security-Policy"))
	require.NotContains(t, serve.PageCSP, "unsafe-inline")
	require.NotContains(t, string(html), "<script>", "no inline script: the policy would block it")
	resp, err = http.Get(a.http.URL + "/v1/page.js")
	require.NoError(t, err)
	js, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(js), "textContent")
	require.NotContains(t, string(js), "innerHTML")
	require.Contains(t, doc["paths"], "/v1/schedules/{id}")

	for _, tt := range []struct {
		body  map[string]any
		field string
		want  string
	}{
		{map[string]any{"url": target.url + "/hook", "period": "1h"}, "url", "--allow-private-targets"},
		{map[string]any{"url": "http://169.254.169.254/latest/meta-data/", "period": "1h"}, "url", "private"},
		{map[string]any{"url": "ftp://203.0.113.10/", "period": "1h"}, "url", "http:// or https://"},
		{map[string]any{"period": "1h"}, "url", "is required"},
		{map[string]any{"url": "https://203.0.113.10/", "period": "45m"}, "period", "nearest: 1h"},
		{map[string]any{"url": "https://203.0.113.10/", "period": "1h0m1s"}, "period", "the nearest are 1h and 1h0m2s"},
		{map[string]any{"url": "https://203.0.113.10/", "period": "monthly"}, "period", "monthly is not served here"},
		{map[string]any{"url": "https://203.0.113.10/", "period": "1m", "timeout": "45s"}, "timeout", "more than half the period"},
		{map[string]any{"url": "https://203.0.113.10/", "period": "1h", "retries": 11}, "retries", "between 0 and 10"},
		{map[string]any{"url": "https://203.0.113.10/", "period": "1h", "method": "TRACE"}, "method", "must be one of"},
		{map[string]any{"url": "https://203.0.113.10/", "period": "1h", "headers": map[string]string{"Host": "evil"}}, "headers", "may not set Host"},
		{map[string]any{"url": "https://203.0.113.10/", "period": "1h", "body": strings.Repeat("x", serve.MaxBody+1)}, "body", "at most"},
	} {
		var e apiErr
		require.Equal(t, http.StatusBadRequest, a.do("POST", "/v1/schedules", tt.body, &e), "%v", tt.body)
		require.Equal(t, tt.field, e.Field, e.Error)
		require.Contains(t, e.Error, tt.want)
	}
	// One JSON object, nothing after it.
	req, err := http.NewRequest("POST", a.http.URL+"/v1/schedules", strings.NewReader(`{"url": "https://203.0.113.10/", "period": "1h"} {"period": "1m"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	// Made-up tokens, many: refused, and the known token still works (it
	// is served from the cache while lookups of unknown ones are spent).
	good = a.token
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules?limit=1", nil, nil))
	for i := range 60 {
		a.token = "rs_made_up_" + strconv.Itoa(i)
		require.Equal(t, http.StatusUnauthorized, a.do("GET", "/v1/schedules?limit=1", nil, nil))
	}
	a.token = good
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules?limit=1", nil, nil))

	var e apiErr
	require.Equal(t, http.StatusBadRequest, a.do("POST", "/v1/schedules", map[string]any{"url": "https://203.0.113.10/", "period": "1h", "cron": "* * * * *"}, &e))
	require.Equal(t, "cron", e.Field)
	require.Contains(t, e.Error, "cron is not a field of this request")
	require.Zero(t, target.conns.Load(), "the loopback target was refused without a connection")

	// Created: its offset is its place in the period; its next calls are
	// one period apart, at that place.
	var sc serve.Schedule
	require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": "https://203.0.113.10/hook?a=1", "period": "1h",
		"headers": map[string]string{"X-Tenant": "42"}, "body": `{"ping":true}`}, &sc))
	require.NotEqual(t, uuid.Nil, sc.ID)
	require.Equal(t, sc.Tenant.String()+" https://203.0.113.10:443", sc.Upstream, "the tenant, the URL's scheme, host and port by default")
	require.Equal(t, "POST", sc.Method)
	require.Equal(t, 3, sc.Retries)
	require.Len(t, sc.NextCalls, 3)
	require.True(t, sc.OffsetSeconds >= 0 && sc.OffsetSeconds < 3600)
	for i, c := range sc.NextCalls {
		require.True(t, c.After(time.Now()))
		require.InDelta(t, sc.OffsetSeconds, float64(c.Unix()%3600)+float64(c.Nanosecond())/1e9, 1e-6, "call %d is at the schedule's place in the hour", i)
		if i > 0 {
			require.Equal(t, time.Hour, c.Sub(sc.NextCalls[i-1]))
		}
	}

	// Spread evenly: 320 schedules of 1h fall into the hour's 16 quarters
	// of 225 s as a uniform spread does (chi-square, 15 degrees of
	// freedom, below 60: a false alarm once in four million runs; offsets
	// bunched at a few places give thousands).
	bins := make([]int, 16)
	for range 320 {
		var more serve.Schedule
		require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": "https://203.0.113.10/spread", "period": "1h", "paused": true}, &more))
		bins[int(more.OffsetSeconds/225)]++
	}
	var chi2 float64
	for _, n := range bins {
		chi2 += float64((n-20)*(n-20)) / 20
	}
	require.Less(t, chi2, 60.0, "offsets per 225 s of the hour: %v", bins)
	var spread struct {
		Schedules []serve.Schedule `json:"schedules"`
	}
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules?limit=1000&paused=true", nil, &spread))
	require.Len(t, spread.Schedules, 320)
	for _, sc := range spread.Schedules {
		require.Equal(t, "paused", sc.Health.Status)
		require.Nil(t, sc.Health.LastCall)
		require.Equal(t, http.StatusOK, a.do("DELETE", "/v1/schedules/"+sc.ID.String(), nil, nil))
	}

	// Several more, paged through two at a time: each once.
	ids := map[uuid.UUID]bool{sc.ID: true}
	for range 4 {
		var more serve.Schedule
		require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": "https://198.51.100.7/x", "period": "1m"}, &more))
		ids[more.ID] = true
	}
	seen := map[uuid.UUID]int{}
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		var page struct {
			Schedules []serve.Schedule `json:"schedules"`
			Next      *uuid.UUID       `json:"next"`
		}
		require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules?limit=2"+after, nil, &page))
		for _, s := range page.Schedules {
			seen[s.ID]++
		}
		if page.Next == nil {
			break
		}
		after = "&after=" + page.Next.String()
	}
	require.Len(t, seen, 5)
	for id := range ids {
		require.Equal(t, 1, seen[id])
	}
	var filtered struct {
		Schedules []serve.Schedule `json:"schedules"`
	}
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules?period=1m", nil, &filtered))
	require.Len(t, filtered.Schedules, 4)

	// Paused: no next calls; resumed: the same place.
	var paused serve.Schedule
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+sc.ID.String(), map[string]any{"paused": true}, &paused))
	require.True(t, paused.Paused)
	require.Empty(t, paused.NextCalls)
	var resumed serve.Schedule
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+sc.ID.String(), map[string]any{"paused": false, "timeout": "5s"}, &resumed))
	require.Equal(t, sc.Offset, resumed.Offset)
	require.Equal(t, "5s", resumed.Timeout)
	require.Equal(t, map[string]string{"X-Tenant": serve.HiddenValue}, resumed.Headers, "header values are write-only")
	var stored map[string]string
	require.NoError(t, a.srv.Pool().QueryRow(context.Background(), `SELECT headers FROM `+pgx.Identifier{a.srv.Schema(), serve.SchedulesTable}.Sanitize()+` WHERE id = $1`, sc.ID).Scan(&stored))
	require.Equal(t, map[string]string{"X-Tenant": "42"}, stored, "fields not given are kept")
	// The upstream key is the URL's host, with an optional sub-key: a new
	// URL moves it to the new host's limits, keeping the sub-key.
	var moved serve.Schedule
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+sc.ID.String(), map[string]any{"upstream": "tenant-42"}, &moved))
	require.Equal(t, moved.Tenant.String()+" https://203.0.113.10:443/tenant-42", moved.Upstream)
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+sc.ID.String(), map[string]any{"url": "https://198.51.100.9/hook"}, &moved))
	require.Equal(t, moved.Tenant.String()+" https://198.51.100.9:443/tenant-42", moved.Upstream)
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+sc.ID.String(), map[string]any{"upstream": ""}, &moved))
	require.Equal(t, moved.Tenant.String()+" https://198.51.100.9:443", moved.Upstream)
	for _, bad := range []map[string]any{
		{"upstream": "other.example/x"},
		{"headers": map[string]string{"X-A": "1", "x-a": "2"}},
		{"headers": map[string]string{"X-A": "a\x00b"}},
		{"headers": map[string]string{"Keep-Alive": "1"}},
	} {
		require.Equal(t, http.StatusBadRequest, a.do("PATCH", "/v1/schedules/"+sc.ID.String(), bad, &e), "%v", bad)
	}
	require.Equal(t, http.StatusBadRequest, a.do("PATCH", "/v1/schedules/"+sc.ID.String(), map[string]any{"period": "2h"}, &e))
	require.Equal(t, "period", e.Field)

	// Deleted: readable, out of the list, not changeable.
	require.Equal(t, http.StatusOK, a.do("DELETE", "/v1/schedules/"+sc.ID.String(), nil, nil))
	var gone serve.Schedule
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+sc.ID.String(), nil, &gone))
	require.NotNil(t, gone.DeletedAt)
	require.Empty(t, gone.NextCalls)
	require.Equal(t, http.StatusNotFound, a.do("PATCH", "/v1/schedules/"+sc.ID.String(), map[string]any{"paused": true}, &e))
	require.Equal(t, http.StatusNotFound, a.do("DELETE", "/v1/schedules/"+sc.ID.String(), nil, nil))
	require.Equal(t, http.StatusNotFound, a.do("GET", "/v1/schedules/"+uuid.NewString(), nil, nil))
	var all struct {
		Schedules []serve.Schedule `json:"schedules"`
	}
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules", nil, &all))
	require.Len(t, all.Schedules, 4)

	// A new token works; the token file is written once, then accepted.
	var tok struct {
		Token string `json:"token"`
	}
	require.Equal(t, http.StatusCreated, a.do("POST", "/v1/tokens", map[string]any{"name": "ci"}, &tok))
	first := a.token
	a.token = tok.Token
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules", nil, nil))
	// Listed without their values, and revoked: the revoked one is
	// refused at once by this process.
	var toks struct {
		Tokens []struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
		} `json:"tokens"`
	}
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/tokens", nil, &toks))
	require.Len(t, toks.Tokens, 2)
	require.Equal(t, "ci", toks.Tokens[1].Name)
	a.token = first
	require.Equal(t, http.StatusOK, a.do("DELETE", "/v1/tokens/"+strconv.FormatInt(toks.Tokens[1].ID, 10), nil, nil))
	a.token = tok.Token
	require.Equal(t, http.StatusUnauthorized, a.do("GET", "/v1/schedules", nil, nil))
	path := filepath.Join(t.TempDir(), "token")
	created, err := a.srv.TokenFile(context.Background(), path)
	require.NoError(t, err)
	require.True(t, created)
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	created, err = a.srv.TokenFile(context.Background(), path)
	require.NoError(t, err)
	require.False(t, created)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	a.token = strings.TrimSpace(string(b))
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules", nil, nil))
}

// TestPrune: calls and deleted schedules older than History go, in
// batches, the newer stay; a server's periods are its own sorted list,
// each once, whatever order (and repeats) its caller gave.
// TestMonthlySchedules: a server with the monthly period in London takes
// "monthly" schedules; each one's next calls fall at its place in each
// calendar month there (month start + its fraction of the month's length,
// worked out here from the calendar), one a month; a timeout is not held
// to half a month; the list filters by the period; a period it does not
// serve is refused naming the nearest fixed one.
func TestMonthlySchedules(t *testing.T) {
	t.Parallel()
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	a := setupConfig(t, serve.Config{Periods: []time.Duration{time.Hour, serve.Monthly}, MonthLocation: london})

	var sc serve.Schedule
	require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": "https://203.0.113.10/bill", "period": "monthly", "timeout": "50s"}, &sc))
	require.Equal(t, "monthly", sc.Period)
	require.Equal(t, "50s", sc.Timeout)
	require.True(t, sc.MonthFraction > 0 && sc.MonthFraction < 1, "%v", sc.MonthFraction)
	require.Len(t, sc.NextCalls, 3)
	for i, c := range sc.NextCalls {
		local := c.In(london)
		start := time.Date(local.Year(), local.Month(), 1, 0, 0, 0, 0, london)
		length := time.Date(local.Year(), local.Month()+1, 1, 0, 0, 0, 0, london).Sub(start)
		require.InDelta(t, sc.MonthFraction, float64(c.Sub(start))/float64(length), 1e-9, "call %d (%s) at the schedule's place in its month", i, local)
		if i > 0 {
			prev := sc.NextCalls[i-1].In(london)
			require.Equal(t, (int(prev.Month())%12)+1, int(local.Month()), "one call a month")
		}
	}
	var list struct {
		Schedules []serve.Schedule `json:"schedules"`
	}
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules?period=monthly", nil, &list))
	require.Len(t, list.Schedules, 1)
	require.Equal(t, sc.ID, list.Schedules[0].ID)
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules?period=1h", nil, &list))
	require.Empty(t, list.Schedules)

	var e apiErr
	require.Equal(t, http.StatusBadRequest, a.do("POST", "/v1/schedules", map[string]any{"url": "https://203.0.113.10/", "period": "24h"}, &e))
	require.Contains(t, e.Error, "this server serves monthly, 1h (the nearest: 1h)")
}

func TestPrune(t *testing.T) {
	t.Parallel()
	periods := []time.Duration{time.Hour, time.Minute, time.Hour}
	a := setup(t, &serve.Guard{}, periods...)
	require.Equal(t, []time.Duration{time.Hour, time.Minute, time.Hour}, periods, "the caller's slice is left as it was")
	var e apiErr
	require.Equal(t, http.StatusBadRequest, a.do("POST", "/v1/schedules", map[string]any{"url": "https://203.0.113.10/", "period": "24h"}, &e))
	require.Contains(t, e.Error, "this server serves 1m, 1h (the nearest: 1h)")

	var old, kept serve.Schedule
	require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": "https://203.0.113.10/old", "period": "1h"}, &old))
	require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": "https://203.0.113.10/kept", "period": "1h"}, &kept))
	require.Equal(t, http.StatusOK, a.do("DELETE", "/v1/schedules/"+kept.ID.String(), nil, nil))
	ctx := context.Background()
	schedules := pgx.Identifier{a.srv.Schema(), serve.SchedulesTable}.Sanitize()
	calls := pgx.Identifier{a.srv.Schema(), serve.CallsTable}.Sanitize()
	_, err := a.srv.Pool().Exec(ctx, `UPDATE `+schedules+` SET deleted_at = now() - interval '8 days' WHERE id = $1`, old.ID)
	require.NoError(t, err)
	// 25,000 calls from eight days ago (more than two batches), 5 recent.
	_, err = a.srv.Pool().Exec(ctx, `INSERT INTO `+calls+` (schedule_id, period_ms, attempt, started_at, latency_ms, ok)
SELECT $1::uuid, 3600000, 1, now() - interval '8 days' + g * interval '1 ms', 1, true FROM generate_series(1, 25000) g
UNION ALL SELECT $1::uuid, 3600000, 1, now() - g * interval '1 minute', 1, true FROM generate_series(1, 5) g`, kept.ID)
	require.NoError(t, err)
	pruned, gone, err := a.srv.Prune(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 25000, pruned)
	require.EqualValues(t, 1, gone)
	require.EqualValues(t, 5, riverslottest.Count(ctx, t, a.srv.Pool(), `SELECT count(*) FROM `+calls))
	require.Equal(t, http.StatusNotFound, a.do("GET", "/v1/schedules/"+old.ID.String(), nil, nil))
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+kept.ID.String(), nil, nil), "deleted today: still readable")
}
