package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/internal/upstream"
)

// TestMigrateRenamesUpstreamPlaces: a database made by a version that called
// the limiter's places table riverslot_upstream_job (its primary key
// riverslot_upstream_job_pkey) comes out of riverslot.Migrate with
// riverslot_upstream_place, its rows kept (the limiter reads them), its
// primary key renamed, still unlogged; and running Migrate, or the
// limiter's DDL itself, again changes nothing.
func TestMigrateRenamesUpstreamPlaces(t *testing.T) {
	parallel(t)

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	require.NoError(t, riverslot.Migrate(ctx, pool, schema))

	// The earlier version's table: the same columns and primary key under
	// the old names, with a sync holding a place in line.
	places := pgx.Identifier{schema, upstream.PlacesTable}.Sanitize()
	old := pgx.Identifier{schema, "riverslot_upstream_job"}.Sanitize()
	oldKey := pgx.Identifier{schema, "riverslot_upstream_job_pkey"}.Sanitize()
	for _, sql := range []string{
		"CREATE UNLOGGED TABLE " + old + " (LIKE " + places + " INCLUDING ALL)",
		"DROP TABLE " + places,
		"INSERT INTO " + pgx.Identifier{schema, upstream.Table}.Sanitize() + " (task, key) VALUES ('transactions', 'bank-a')",
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	var made bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", oldKey).Scan(&made))
	require.True(t, made, "the old table's primary key has the old name")
	reservedAt := time.Date(2030, 1, 1, 0, 0, 5, 0, time.UTC)
	_, err := pool.Exec(ctx, "INSERT INTO "+old+" (task, key, job_id, reserved_at, throttled) VALUES ('transactions', 'bank-a', 42, $1, true)", reservedAt)
	require.NoError(t, err)

	type place struct {
		Task       string
		Key        string
		JobID      int64
		ReservedAt time.Time
		Throttled  bool
		Deferred   bool
	}
	requireMigrated := func(t *testing.T) {
		t.Helper()

		var oldTable, newTable, oldPKey, newPKey *string
		var persistence string
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1)::text, to_regclass($2)::text, to_regclass($3)::text, to_regclass($4)::text, (SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass($2))",
			old, places, oldKey, pgx.Identifier{schema, upstream.PlacesTable + "_pkey"}.Sanitize()).
			Scan(&oldTable, &newTable, &oldPKey, &newPKey, &persistence))
		require.Nil(t, oldTable, "the old table is renamed")
		require.NotNil(t, newTable)
		require.Nil(t, oldPKey, "the old primary key is renamed")
		require.NotNil(t, newPKey)
		require.Equal(t, "u", persistence, "still unlogged")

		rows, err := pool.Query(ctx, "SELECT task, key, job_id, reserved_at, throttled, deferred FROM "+places)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[place])
		require.NoError(t, err)
		require.Len(t, got, 1, "the row is kept")
		got[0].ReservedAt = got[0].ReservedAt.UTC()
		require.Equal(t, place{Task: "transactions", Key: "bank-a", JobID: 42, ReservedAt: reservedAt, Throttled: true}, got[0])

		states, err := upstream.New(schema).List(ctx, pool, "transactions", "", 10)
		require.NoError(t, err)
		require.Len(t, states, 1)
		require.Equal(t, 1, states[0].Waiting, "the limiter counts the kept place in line")
	}

	require.NoError(t, riverslot.Migrate(ctx, pool, schema))
	requireMigrated(t)

	t.Run("MigrateAgain", func(t *testing.T) {
		require.NoError(t, riverslot.Migrate(ctx, pool, schema))
		requireMigrated(t)
	})

	t.Run("DDLOnTheNewName", func(t *testing.T) {
		for _, ddl := range upstream.DDL(schema) {
			_, err := pool.Exec(ctx, ddl)
			require.NoError(t, err, ddl)
		}
		requireMigrated(t)
	})
}

// TestMigrateAddsUpstreamColumns: a database whose limiter tables an
// earlier version made, without the columns later versions read (the 429
// pause's start, the breaker's outage span, a deferred sync's first
// deferral), gets them from riverslot.Migrate, its rows kept. Migrate
// looked only for missing tables, so such a database kept failing every
// limited sync after an upgrade.
func TestMigrateAddsUpstreamColumns(t *testing.T) {
	parallel(t)

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	require.NoError(t, riverslot.Migrate(ctx, pool, schema))
	table := pgx.Identifier{schema, upstream.Table}.Sanitize()
	for _, sql := range []string{
		"ALTER TABLE " + table + " DROP COLUMN paused_since, DROP COLUMN open_since, DROP COLUMN closed_at",
		"ALTER TABLE " + pgx.Identifier{schema, upstream.PlacesTable}.Sanitize() + " DROP COLUMN deferred_at",
		"INSERT INTO " + table + " (task, key) VALUES ('transactions', 'bank-a')",
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	current, err := upstream.Current(ctx, pool, schema)
	require.NoError(t, err)
	require.False(t, current, "the earlier version's tables lack columns")

	require.NoError(t, riverslot.Migrate(ctx, pool, schema))
	current, err = upstream.Current(ctx, pool, schema)
	require.NoError(t, err)
	require.True(t, current, "Migrate adds the columns")
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE task = 'transactions' AND key = 'bank-a' AND paused_since IS NULL AND open_since IS NULL AND closed_at IS NULL").Scan(&n))
	require.Equal(t, 1, n, "the row is kept, its new columns empty")
}
