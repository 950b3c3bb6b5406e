package riverjob_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

func TestByID(t *testing.T) {
	t.Parallel()

	// setup returns a pool and a fresh schema with River's tables.
	setup := func(t *testing.T) (context.Context, *pgxpool.Pool, string) {
		t.Helper()
		ctx := context.Background()
		pool := riverslottest.Pool(t)
		return ctx, pool, riverslottest.Schema(ctx, t, pool)
	}
	// insert adds a job to River's table as River leaves it after attempt
	// tries that each failed with one of errs.
	insert := func(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, state string, attempt int, errs ...string) int64 {
		t.Helper()
		var id int64
		require.NoError(t, pool.QueryRow(ctx, "INSERT INTO "+riverjob.QualifiedTable(schema)+
			` (kind, args, state, attempt, max_attempts, errors, finalized_at)
			VALUES ('test', '{}', $1, $2, 25,
				(SELECT array_agg(jsonb_build_object('attempt', n, 'error', e) ORDER BY n) FROM unnest($3::text[]) WITH ORDINALITY AS x(e, n)),
				CASE WHEN $4 THEN now() END)
			RETURNING id`, state, attempt, errs, slices.Contains([]string{"completed", "cancelled", "discarded"}, state)).Scan(&id))
		return id
	}

	t.Run("StateAttemptAndLastError", func(t *testing.T) {
		t.Parallel()
		ctx, pool, schema := setup(t)

		retried := insert(ctx, t, pool, schema, "retryable", 2, "first failure", "second failure")
		running := insert(ctx, t, pool, schema, "running", 1)
		done := insert(ctx, t, pool, schema, "completed", 1)

		jobs, err := riverjob.ByID(ctx, pool, schema, []int64{retried, running, done})
		require.NoError(t, err)
		require.Equal(t, map[int64]riverjob.Job{
			retried: {State: "retryable", Attempt: 2, LastError: "second failure"},
			running: {State: "running", Attempt: 1},
			done:    {State: "completed", Attempt: 1},
		}, jobs)
	})

	t.Run("DeletedJobIsAbsent", func(t *testing.T) {
		t.Parallel()
		ctx, pool, schema := setup(t)

		kept := insert(ctx, t, pool, schema, "available", 0)
		deleted := insert(ctx, t, pool, schema, "completed", 1)
		_, err := pool.Exec(ctx, "DELETE FROM "+riverjob.QualifiedTable(schema)+" WHERE id = $1", deleted)
		require.NoError(t, err)

		jobs, err := riverjob.ByID(ctx, pool, schema, []int64{kept, deleted})
		require.NoError(t, err)
		require.Equal(t, map[int64]riverjob.Job{kept: {State: "available"}}, jobs)
	})

	t.Run("NoIDs", func(t *testing.T) {
		t.Parallel()
		ctx, pool, schema := setup(t)

		jobs, err := riverjob.ByID(ctx, pool, schema, nil)
		require.NoError(t, err)
		require.Empty(t, jobs)
		require.NotNil(t, jobs, "an empty map, not nil, so callers can index it")
	})
}
