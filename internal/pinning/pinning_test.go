package pinning

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/riverslottest"
	"github.com/riverslot/riverslot/internal/taskspec"
)

// TestPlaceOnce runs Place for one cycle in two transactions at
// once, as two nodes' (or a crashed and a retried) bootstraps would: the
// second waits on the first's claim and, once it commits, reuses its pins;
// a claim rolled back leaves nothing, and the next bootstrap computes them.
func TestPlaceOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id uuid PRIMARY KEY, weight float8 NOT NULL)")
	require.NoError(t, err)
	// 2,000 accounts of weight 1, 20 of weight 500: the heavy ones are pinned.
	_, err = pool.Exec(ctx, "INSERT INTO "+accounts+" SELECT gen_random_uuid(), CASE WHEN g <= 20 THEN 500 ELSE 1 END FROM generate_series(1, 2020) g")
	require.NoError(t, err)
	for _, ddl := range taskspec.PinsDDL(schema) {
		_, err := pool.Exec(ctx, ddl)
		require.NoError(t, err)
	}
	spec := riverslottest.Spec(t, "transactions", schema, "accounts", "", 16*time.Second, 100)
	spec.Weight, spec.WeightEpsilon = "weight", 0.1
	spec.BuildSQL()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pins := pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()

	t.Run("RolledBackLeavesNothing", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		got, err := Place(ctx, tx, spec, start.Add(-time.Hour))
		require.NoError(t, err)
		require.False(t, got.Reused)
		require.Equal(t, 20, got.Pinned)
		require.NoError(t, tx.Rollback(ctx))
		require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pins))
	})

	t.Run("SecondWaitsAndReuses", func(t *testing.T) {
		first, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer first.Rollback(ctx) //nolint:errcheck
		got, err := Place(ctx, first, spec, start)
		require.NoError(t, err)
		require.False(t, got.Reused)
		require.Equal(t, 20, got.Pinned)

		second, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer second.Rollback(ctx) //nolint:errcheck
		pid := second.Conn().PgConn().PID()
		done := make(chan Outcome, 1)
		go func() {
			o, err := Place(ctx, second, spec, start)
			if err != nil {
				o.Pinned = -1
			}
			done <- o
		}()
		// The second claim waits on the first's uncommitted row.
		riverslottest.WaitFor(t, 10*time.Second, "the second claim to wait on a lock", func() bool {
			return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = $1", int32(pid)) > 0
		})
		select {
		case o := <-done:
			t.Fatalf("second Place returned before the first committed: %+v", o)
		default:
		}
		require.NoError(t, first.Commit(ctx))
		o := <-done
		require.True(t, o.Reused, "the second bootstrap reuses the committed pins")
		require.NoError(t, second.Commit(ctx))
		require.EqualValues(t, 20, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pins+" WHERE cycle_start = $1", start))
	})
}

// TestPlaceIgnoresBadWeights gives accounts NULL, negative, NaN and
// infinite weights beside 20 heavy ones: those count as 0, so exactly the
// 20 heavy accounts are pinned and the threshold is finite.
func TestPlaceIgnoresBadWeights(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id uuid PRIMARY KEY, weight float8)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+accounts+" SELECT gen_random_uuid(), CASE WHEN g <= 20 THEN 500 ELSE 1 END FROM generate_series(1, 2020) g")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+accounts+" VALUES (gen_random_uuid(), 'NaN'), (gen_random_uuid(), 'Infinity'), (gen_random_uuid(), NULL), (gen_random_uuid(), -1e9)")
	require.NoError(t, err)
	for _, ddl := range taskspec.PinsDDL(schema) {
		_, err := pool.Exec(ctx, ddl)
		require.NoError(t, err)
	}
	spec := riverslottest.Spec(t, "transactions", schema, "accounts", "", 16*time.Second, 100)
	spec.Weight, spec.WeightEpsilon = "weight", 0.1
	spec.BuildSQL()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	got, err := Place(ctx, tx, spec, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	require.Equal(t, 20, got.Pinned)
	require.InDelta(t, 1.0, got.Threshold, 0, "the heavy accounts are pinned above weight 1")
	var heavy int64
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()+" WHERE weight = 500").Scan(&heavy))
	require.EqualValues(t, 20, heavy, "the 20 heavy accounts are the pins")
}
