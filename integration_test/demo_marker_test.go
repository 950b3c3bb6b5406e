package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
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

// heavyProcessTests bounds how many of the tests that run a riverslot demo
// and several workers (about 25 connections each) run at once, so that with
// the rest of the suite they fit in Postgres' default max_connections.
var heavyProcessTests = make(chan struct{}, 2)

// holdHeavyProcessSlot waits for a slot of heavyProcessTests and frees it
// when the test ends.
func holdHeavyProcessSlot(t *testing.T) {
	t.Helper()
	heavyProcessTests <- struct{}{}
	t.Cleanup(func() { <-heavyProcessTests })
}
