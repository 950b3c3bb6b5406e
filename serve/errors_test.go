package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// TestInternalErrorHidesTheDatabase: a request the database fails is a
// 500 whose body names a request id and nothing of the database (no
// table, schema or error text); the log holds the cause under that id.
func TestInternalErrorHidesTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	require.NoError(t, serve.Migrate(ctx, pool, schema))
	logger, records := riverslottest.RecordingLogger(slog.LevelWarn)
	srv, err := serve.New(serve.Config{Pool: pool, Schema: schema, Logger: logger})
	require.NoError(t, err)
	token, err := srv.AddToken(ctx, "test")
	require.NoError(t, err)
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)

	// The schedules table goes away under the running server.
	_, err = pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, serve.SchedulesTable}.Sanitize()+" RENAME TO gone")
	require.NoError(t, err)

	req, err := http.NewRequest(http.MethodGet, h.URL+"/v1/schedules", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	var body struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	for _, leak := range []string{schema, serve.SchedulesTable, "relation", "SQLSTATE", "does not exist"} {
		require.NotContains(t, body.Error, leak, "the 500's body must not echo the database's error")
	}

	logged := records.Find("riverslot serve: request failed")
	require.Len(t, logged, 1)
	id := logged[0]["request_id"].String()
	require.NotEmpty(t, id)
	require.Contains(t, body.Error, id, "the body names the request id the log has the cause under")
	require.True(t, strings.Contains(logged[0]["error"].String(), serve.SchedulesTable), "the log keeps the cause: %s", logged[0]["error"])
}

// TestBadFieldsBeforeDNS: a request's own mistakes (period, method,
// headers, timeout, retries) are answered before the URL's host is
// resolved: offline, or with a broken resolver, a bad period is named as
// such, not hidden behind a DNS error, and costs no lookup.
func TestBadFieldsBeforeDNS(t *testing.T) {
	t.Parallel()
	var lookups atomic.Int64
	broken := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		lookups.Add(1)
		return nil, errors.New("no network")
	}}
	a := setup(t, &serve.Guard{Resolver: broken}, time.Hour)
	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"url": "https://api.example.com/hook", "period": "7s"}, "period"},
		{map[string]any{"url": "https://api.example.com/hook", "period": "1h", "method": "BREW"}, "method"},
		{map[string]any{"url": "https://api.example.com/hook", "period": "1h", "timeout": "45m"}, "timeout"},
		{map[string]any{"url": "https://api.example.com/hook", "period": "1h", "retries": -1}, "retries"},
		{map[string]any{"url": "https://api.example.com/hook", "period": "1h", "headers": map[string]string{"Bad Name": "x"}}, "headers"},
	} {
		var e apiErr
		require.Equal(t, http.StatusBadRequest, a.do("POST", "/v1/schedules", tc.body, &e), "%v", tc.body)
		require.Equal(t, tc.field, e.Field, "%v: %s", tc.body, e.Error)
	}
	require.Zero(t, lookups.Load(), "no DNS lookup for a request refused on its own fields")

	// A request whose fields are all fine reaches the URL's check, and
	// the broken resolver is named there.
	var e apiErr
	require.Equal(t, http.StatusBadRequest, a.do("POST", "/v1/schedules", map[string]any{"url": "https://api.example.com/hook", "period": "1h"}, &e))
	require.Equal(t, "url", e.Field, e.Error)
	require.NotZero(t, lookups.Load())
}

// TestBadRequestsHideGoErrors: a 400 for a body the JSON decoder cannot
// read, or for a URL whose host the resolver cannot look up, is a fixed
// message naming the field (when there is one) and the fix, with a request
// id: nothing of the decoder's or the resolver's text (which names the
// server's DNS server). The log holds that text under the id.
func TestBadRequestsHideGoErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	require.NoError(t, serve.Migrate(ctx, pool, schema))
	logger, records := riverslottest.RecordingLogger(slog.LevelInfo)
	broken := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("dial udp 10.9.8.7:53: the server's own resolver is down")
	}}
	srv, err := serve.New(serve.Config{Pool: pool, Schema: schema, Logger: logger, Periods: []time.Duration{time.Hour}, Guard: &serve.Guard{Resolver: broken}})
	require.NoError(t, err)
	token, err := srv.AddToken(ctx, "test")
	require.NoError(t, err)
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)

	for _, tc := range []struct {
		path, body, field string
		leaks             []string // the Go text the answer must not carry
	}{
		{"/v1/schedules", `{"url": 5, "period": "1h"}`, "url", []string{"json:", "unmarshal", "Go value", "number"}},
		{"/v1/schedules", `{"url": "https://203.0.113.10/", "period": "1h", "retries": "3"}`, "retries", []string{"json:", "unmarshal", "Go struct field", "int"}},
		{"/v1/schedules", `{"url": "https://203.0.113.10/", "headers": {"X-A": 1}}`, "headers", []string{"json:", "unmarshal"}},
		{"/v1/schedules", `{"url": "https://203.0.113.10/", "perod": "1h"}`, "perod", []string{"json:", "unknown field"}},
		{"/v1/schedules", `{"url": "https://203.0.113.10/",`, "", []string{"json:", "unexpected EOF", "unexpected end"}},
		{"/v1/schedules", `{"url" "x"}`, "", []string{"json:", "invalid character", "after object key"}},
		{"/v1/schedules", `[1, 2]`, "", []string{"json:", "unmarshal", "Go value", "serve.input"}},
		{"/v1/schedules", `{"period": "1h"} {"period": "1h"}`, "", []string{"data after"}},
		{"/v1/schedules", ``, "", []string{"EOF"}},
		{"/v1/tenants", `{"name": ["acme"]}`, "name", []string{"json:", "unmarshal", "Go struct field"}},
		{"/v1/schedules", `{"url": "https://api.example.com/hook", "period": "1h"}`, "url", []string{"10.9.8.7", "dial", "lookup", "resolver is down", "udp"}},
		{"/v1/schedules", `{"url": "http://[::1", "period": "1h"}`, "url", []string{"parse", "missing ']'", "[::1"}},
	} {
		req, err := http.NewRequest(http.MethodPost, h.URL+tc.path, strings.NewReader(tc.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var e apiErr
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		resp.Body.Close()
		t.Logf("%s → %s", tc.body, e.Error)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", tc.body, e.Error)
		require.Equal(t, tc.field, e.Field, "%s: %s", tc.body, e.Error)
		for _, leak := range tc.leaks {
			require.NotContains(t, e.Error, leak, "%s: the 400 echoes Go's error text", tc.body)
		}
		// The log has the cause under the id the answer names.
		_, id, ok := strings.Cut(e.Error, "(request ")
		require.True(t, ok, "%s: no request id in %q", tc.body, e.Error)
		id = strings.TrimSuffix(id, ")")
		var found bool
		for _, rec := range records.Find("riverslot serve: request refused") {
			if rec["request_id"].String() == id {
				found = true
				require.NotEmpty(t, rec["error"].String())
			}
		}
		require.True(t, found, "%s: the log has no cause under request %s", tc.body, id)
	}
	var dns bool
	for _, rec := range records.Find("riverslot serve: request refused") {
		dns = dns || strings.Contains(rec["error"].String(), "10.9.8.7")
	}
	require.True(t, dns, "the resolver's error is in the log")
}
