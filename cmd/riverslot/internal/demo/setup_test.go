package demo

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestSchemaOwnership runs the demo's setup step on a schema it creates:
// the schema is marked as the demo's, a rerun without --keep drops and
// recreates it (a stray table goes), a rerun with --keep keeps it.
func TestSchemaOwnership(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	// A fresh name that does not exist yet, dropped when the test ends.
	schema := riverslottest.EmptySchema(ctx, t, pool)
	_, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	stray := pgx.Identifier{schema, "stray"}.Sanitize()

	prepare := func(t *testing.T, keep bool) string {
		t.Helper()
		var stderr bytes.Buffer
		d := &demo{cfg: &Config{Schema: schema, Accounts: 20, Keep: keep}, pool: pool, stderr: &stderr}
		n, err := d.prepare(ctx)
		require.NoError(t, err, stderr.String())
		require.EqualValues(t, 20, n)
		state, err := QuerySchemaState(ctx, pool, schema)
		require.NoError(t, err)
		require.Equal(t, SchemaOwned, state)
		return stderr.String()
	}
	strayExists := func(t *testing.T) bool {
		t.Helper()
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", stray).Scan(&ok))
		return ok
	}

	state, err := QuerySchemaState(ctx, pool, schema)
	require.NoError(t, err)
	require.Equal(t, SchemaAbsent, state)

	require.Contains(t, prepare(t, false), "creating schema "+schema)
	_, err = pool.Exec(ctx, "CREATE TABLE "+stray+" (x int)")
	require.NoError(t, err)

	require.Contains(t, prepare(t, true), "keeping 20 existing accounts")
	require.True(t, strayExists(t), "--keep reuses the schema")

	require.Contains(t, prepare(t, false), "dropping and recreating schema "+schema+", created by an earlier demo")
	require.False(t, strayExists(t), "without --keep the demo's own schema is recreated")
}
