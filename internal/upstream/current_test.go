package upstream_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/upstream"
)

// TestDDLUpgrades: tables an earlier version made, without the columns
// this one reads (the 429 pause's start, the outage's bounds, a deferral's
// start), are not Current, and a decision says to run Migrate; the DDL
// adds the columns, keeping the rows, and the breaker works on them.
func TestDDLUpgrades(t *testing.T) {
	t.Parallel()
	b := setup(t)
	table, places := pgx.Identifier{b.schema, upstream.Table}.Sanitize(), pgx.Identifier{b.schema, upstream.PlacesTable}.Sanitize()
	current, err := upstream.Current(b.ctx, b.pool, b.schema)
	require.NoError(t, err)
	require.True(t, current)

	limits := upstream.Limits{FailureThreshold: 1, Cooldown: time.Minute}
	r := b.req("bank-1", limits)
	require.Equal(t, upstream.Run, b.acquire(t, r).Verdict)
	for _, sql := range []string{
		"ALTER TABLE " + table + " DROP COLUMN paused_since, DROP COLUMN open_since, DROP COLUMN closed_at",
		"ALTER TABLE " + places + " DROP COLUMN deferred_at",
	} {
		_, err := b.pool.Exec(b.ctx, sql)
		require.NoError(t, err)
	}
	current, err = upstream.Current(b.ctx, b.pool, b.schema)
	require.NoError(t, err)
	require.False(t, current)
	_, err = b.lim.Acquire(b.ctx, b.pool, b.req("bank-2", limits))
	require.ErrorContains(t, err, "riverslot.Migrate")

	for _, ddl := range upstream.DDL(b.schema) {
		_, err := b.pool.Exec(b.ctx, ddl)
		require.NoError(t, err, ddl)
	}
	current, err = upstream.Current(b.ctx, b.pool, b.schema)
	require.NoError(t, err)
	require.True(t, current)
	require.Equal(t, 1, b.state(t, "bank-1").InFlight, "the rows are kept")

	rel, err := b.lim.Release(b.ctx, b.pool, r, upstream.Failed, 0)
	require.NoError(t, err)
	require.True(t, rel.Open)
	d := b.acquire(t, b.req("bank-1", limits))
	require.Equal(t, upstream.Wait, d.Verdict)
	require.Equal(t, "open", d.Reason)

	empty, err := upstream.Current(b.ctx, b.pool, "riverslot_no_such_schema")
	require.NoError(t, err)
	require.False(t, empty, "no tables")
}
