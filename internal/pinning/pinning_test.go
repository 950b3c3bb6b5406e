package pinning

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestPlaceOnce runs Place for one cycle in two transactions at
// once, as two nodes' (or a crashed and a retried) bootstraps would: the
// second waits on the first's claim and, once it commits, reuses its pins;
// a claim rolled back leaves nothing, and the next bootstrap computes them.
func TestPlaceOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The heavy ones are pinned.
	pool, schema, spec := weightedTask(t, heavy60)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pins := pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()

	t.Run("RolledBackLeavesNothing", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		got, err := Place(ctx, tx, pool, spec, start.Add(-time.Hour))
		require.NoError(t, err)
		require.False(t, got.Reused)
		require.Equal(t, 60, got.Pinned)
		require.NoError(t, tx.Rollback(ctx))
		require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pins))
	})

	t.Run("SecondWaitsAndReuses", func(t *testing.T) {
		first, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer first.Rollback(ctx) //nolint:errcheck
		got, err := Place(ctx, first, pool, spec, start)
		require.NoError(t, err)
		require.False(t, got.Reused)
		require.Equal(t, 60, got.Pinned)

		second, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer second.Rollback(ctx) //nolint:errcheck
		pid := second.Conn().PgConn().PID()
		done := make(chan Outcome, 1)
		go func() {
			o, err := Place(ctx, second, pool, spec, start)
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
		require.EqualValues(t, 60, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pins+" WHERE cycle_start = $1", start))
	})
}

// TestPlaceIgnoresBadWeights gives accounts NULL, negative, NaN and
// infinite weights beside 60 heavy ones: those count as 0, so exactly the
// 60 heavy accounts are pinned and the threshold is finite.
func TestPlaceIgnoresBadWeights(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, spec := weightedTask(t, heavy60,
		"INSERT INTO %s VALUES (gen_random_uuid(), 'NaN'), (gen_random_uuid(), 'Infinity'), (gen_random_uuid(), NULL), (gen_random_uuid(), -1e9)")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	got, err := Place(ctx, tx, pool, spec, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	require.Equal(t, 60, got.Pinned)
	require.InDelta(t, 1.0, got.Threshold, 0, "the heavy accounts are pinned above weight 1")
	var heavy int64
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()+" WHERE weight = 150").Scan(&heavy))
	require.EqualValues(t, 60, heavy, "the 60 heavy accounts are the pins")
}

// A giant account (heavier than half a mean slot) gets a slot of its own:
// Place lists that slot's accounts from the table and pins them elsewhere,
// so the giant's slot serves the giant alone.
func TestPlaceGiant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// 3,200 accounts of weight 1 over 16 slots (a mean slot of 200 without
	// the giant), one of weight 600.
	pool, schema, spec := weightedTask(t, "INSERT INTO %s SELECT gen_random_uuid(), 1 FROM generate_series(1, 3200)",
		"INSERT INTO %s VALUES (gen_random_uuid(), 600)")
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = Place(ctx, tx, pool, spec, start)
	require.NoError(t, err)

	// Per-slot load as the per-slot jobs will serve it: the pin's slot, else
	// the hash slot (16 slots: bucket / 16).
	pins := pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()
	rows, err := tx.Query(ctx, `SELECT coalesce(p.slot, get_byte(uuid_send(a.id), 15) / 16) AS slot, sum(a.weight), count(*) FILTER (WHERE a.weight = 600)
		FROM `+accounts+` a LEFT JOIN `+pins+` p ON p.account_id = a.id GROUP BY 1 ORDER BY 1`)
	require.NoError(t, err)
	var total, heaviest, giantSlotLoad float64
	giantSlots := 0
	var loads []float64
	for rows.Next() {
		var slot int
		var load float64
		var giants int
		require.NoError(t, rows.Scan(&slot, &load, &giants))
		loads = append(loads, load)
		total += load
		heaviest = max(heaviest, load)
		if giants > 0 {
			giantSlots++
			giantSlotLoad = load
		}
	}
	require.NoError(t, rows.Err())
	require.Len(t, loads, 16)
	mean := total / 16
	require.Equal(t, 1, giantSlots)
	require.Equal(t, 600.0, giantSlotLoad, "the giant's slot serves the giant alone")
	w := 600 / mean
	require.LessOrEqual(t, heaviest/mean, max(1.1, w+0.1))
}

// weightedTask creates a schema with an accounts table (id, weight float8),
// fills it by each of inserts (SQL with %s for the table), creates the pins
// tables, and returns the pool, the schema and a weighted task spec over 16
// slots (a 16 s cycle).
func weightedTask(t *testing.T, inserts ...string) (*pgxpool.Pool, string, *taskspec.Spec) {
	t.Helper()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id uuid PRIMARY KEY, weight float8)")
	require.NoError(t, err)
	for _, insert := range inserts {
		_, err := pool.Exec(ctx, fmt.Sprintf(insert, accounts))
		require.NoError(t, err)
	}
	for _, ddl := range taskspec.PinsDDL(schema) {
		_, err := pool.Exec(ctx, ddl)
		require.NoError(t, err)
	}
	spec := riverslottest.Spec(t, "transactions", schema, "accounts", "", 16*time.Second, 100)
	spec.Weight, spec.WeightEpsilon = "weight", 0.1
	spec.BuildSQL()
	return pool, schema, spec
}

// heavy60 is 2,000 accounts of weight 1 and 60 of weight 150 (a fifth of a
// mean slot each: jumbos, not giants).
const heavy60 = "INSERT INTO %s SELECT gen_random_uuid(), CASE WHEN g <= 60 THEN 150 ELSE 1 END FROM generate_series(1, 2060) g"
