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
