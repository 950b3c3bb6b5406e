package serve_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
