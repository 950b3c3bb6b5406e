package riverslotweb_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/riverslotweb"
)

// brokenHandler returns the handler of a configured scheduler over a
// fresh schema, read as a role of its own that may read every table there,
// the recorder of the handler's logger, and breakDB, which makes the
// database fail: SELECT on table (River's job table or riverslot's
// ledger) revoked from the role, as an operator's mistake would. (A
// missing table would not do: riverslot reads a missing ledger as "no
// cycle yet".) leaks are the words no answer may show: the table, the
// schema, the role, and PostgreSQL's wording.
func brokenHandler(t *testing.T, table string) (h http.Handler, records *riverslottest.Records, breakDB func(), leaks []string) {
	t.Helper()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)

	role := schema + "_web"
	ident := func(parts ...string) string { return pgx.Identifier(parts).Sanitize() }
	_, err := pool.Exec(ctx, "CREATE ROLE "+ident(role)+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+ident(role))
		_, _ = pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+ident(role))
	})
	for _, stmt := range []string{
		"GRANT USAGE ON SCHEMA " + ident(schema) + " TO " + ident(role),
		"GRANT SELECT ON ALL TABLES IN SCHEMA " + ident(schema) + " TO " + ident(role),
	} {
		_, err := pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	cfg := pool.Config().Copy()
	cfg.ConnConfig.User, cfg.ConnConfig.Password, cfg.MaxConns = role, "", 2
	webPool, err := riverslottest.NewPool(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(webPool.Close) // before the role is dropped

	task := riverslot.Task{Name: "transactions", Cycle: 24 * time.Hour, Schema: schema, Table: "accounts", Sync: noopSync}
	s, err := riverslot.New(webPool, &riverslot.Config{Tasks: []riverslot.Task{task}, Logger: riverslottest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, s.Configure(&river.Config{Schema: schema}))
	logger, records := riverslottest.RecordingLogger(slog.LevelError)
	h, err = riverslotweb.New(s, &riverslotweb.Config{Logger: logger})
	require.NoError(t, err)

	breakDB = func() {
		_, err := pool.Exec(ctx, "REVOKE SELECT ON "+ident(schema, table)+" FROM "+ident(role))
		require.NoError(t, err)
	}
	return h, records, breakDB, []string{table, schema, "permission", "SQLSTATE", "SELECT", "relation", "ERROR"}
}

// requireNoLeak checks body shows none of leaks.
func requireNoLeak(t *testing.T, path, body string, leaks []string, msg string) {
	t.Helper()
	for _, leak := range leaks {
		require.NotContains(t, body, leak, "%s: %s", path, msg)
	}
}

// TestHandlerAccountHidesTheDatabase: with SELECT on riverslot's ledger
// revoked, /api/accounts/{id} answers a 500 with a request id only,
// never the database's error (TestHandler covers /api/status and
// /api/cycles); the cause goes to riverslotweb.Config.Logger under that id. The
// words checked for are first shown absent while the database works.
func TestHandlerAccountHidesTheDatabase(t *testing.T) {
	t.Parallel()

	// The ledger: every lookup reads it first (River's job table only once
	// the ledger lists a cycle).
	const table = "riverslot_ledger"
	h, records, breakDB, leaks := brokenHandler(t, table)
	path := "/api/accounts/" + uuid.New().String()

	code, body, _ := get(t, h, path+"?task=transactions")
	require.Equal(t, http.StatusOK, code, body)
	requireNoLeak(t, path, body, leaks, "absent while the database works")

	breakDB()
	code, body, _ = get(t, h, path+"?task=transactions")
	requireJSONError(t, code, body, http.StatusInternalServerError, "internal error reading the schedule (request ")
	requireNoLeak(t, path, body, leaks, "the 500 does not echo the database")

	failed := records.Find("riverslot handler: request failed")
	require.Len(t, failed, 1)
	require.Equal(t, path, failed[0]["path"].String())
	require.Contains(t, body, "request "+failed[0]["request_id"].String()+")", "the body gives the logged id")
	require.Contains(t, failed[0]["error"].String(), table, "the log has the cause")
}

// TestHandlerPageHidesTheDatabase: with SELECT on River's job table or
// riverslot's ledger revoked, the operator's page (alone, and with an account looked
// up) shows no table, column, schema, SQL or PostgreSQL message, whatever
// its status. The words checked for are first shown absent while the
// database works.
func TestHandlerPageHidesTheDatabase(t *testing.T) {
	t.Parallel()

	for _, table := range []string{"river_job", "riverslot_ledger"} {
		t.Run(table, func(t *testing.T) {
			t.Parallel()
			h, _, breakDB, leaks := brokenHandler(t, table)
			paths := []string{"/?task=transactions", "/?task=transactions&account=" + uuid.New().String()}

			for _, path := range paths {
				code, body, _ := get(t, h, path)
				require.Equal(t, http.StatusOK, code, body)
				requireNoLeak(t, path, body, leaks, "absent while the database works")
			}
			breakDB()
			for _, path := range paths {
				code, body, _ := get(t, h, path)
				require.Contains(t, []int{http.StatusOK, http.StatusInternalServerError}, code, "%s: %s", path, body)
				requireNoLeak(t, path, body, leaks, "the page does not echo the database")
			}
		})
	}
}
