package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// demoSchemaMarker is the comment `riverslot demo` writes on the schema it
// creates (demoSchemaComment in cmd/riverslot/demo_setup.go); `riverslot
// worker` serves a schema that carries it.
const demoSchemaMarker = "riverslot demo: created by riverslot demo, which drops and recreates it; keep no other data here"

// markSchemaAsDemos marks a test schema the way the demo marks its own, so
// that `riverslot worker` serves it.
func markSchemaAsDemos(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	_, err := pool.Exec(ctx, "COMMENT ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" IS '"+demoSchemaMarker+"'")
	require.NoError(t, err)
}

// Connections each child process may open, for
// riverslottest.ReserveConnections: startWorker passes --max-conns 5 (a
// worker that reads an accounts database opens a second pool of 5 there);
// a demo with --workers 5 opens min(20, 5+5) plus one for its monitor.
const (
	workerConns = 5
	demoConns   = 11
)

// reserveProcessConns reserves the connections of the demos and workers a
// test runs at once, so that parallel process tests fit in the server's
// max_connections.
func reserveProcessConns(t *testing.T, demos, workers int) {
	t.Helper()
	riverslottest.ReserveConnections(t, demos*demoConns+workers*workerConns)
}
