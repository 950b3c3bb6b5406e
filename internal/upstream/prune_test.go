package upstream_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/upstream"
)

// TestPrune: a key no sync asked about for longer than PruneAfter is
// deleted with its old places; a fresh key, a key with an operator's
// override, one with a live lease, one with a recent place, another task's
// and a key whose row a transaction holds are kept; two cycles of a task
// whose cycle is longer than 3.5 days keep an idle key longer. The first
// decision of a task on a node prunes it.
func TestPrune(t *testing.T) {
	t.Parallel()

	keys := func(t *testing.T, b *bundle) []string {
		t.Helper()
		rows, err := b.pool.Query(b.ctx, "SELECT task || '/' || key FROM "+pgx.Identifier{b.schema, upstream.Table}.Sanitize()+" ORDER BY 1")
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	// idle sets the keys' last use days ago.
	idle := func(t *testing.T, b *bundle, days int, task string, keys ...string) {
		t.Helper()
		tag, err := b.pool.Exec(b.ctx, "UPDATE "+pgx.Identifier{b.schema, upstream.Table}.Sanitize()+
			" SET updated_at = now() - $1 * interval '1 day' WHERE task = $2 AND key = ANY($3)", days, task, keys)
		require.NoError(t, err)
		require.EqualValues(t, len(keys), tag.RowsAffected())
	}

	t.Run("KeepsWhatIsInUse", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		limits := upstream.Limits{Rate: 10}
		for _, key := range []string{"idle", "fresh", "overridden", "cleared", "waiting", "held"} {
			r := b.req(key, limits)
			require.Equal(t, upstream.Run, b.acquire(t, r).Verdict)
			b.release(t, r, upstream.Succeeded, 0)
		}
		other := b.req("idle", limits)
		other.Task = "invoices"
		require.Equal(t, upstream.Run, b.acquire(t, other).Verdict)
		b.release(t, other, upstream.Succeeded, 0)
		leased := b.req("leased", limits)
		leased.Hold = 30 * 24 * time.Hour // a lease that outlives the idle span
		require.Equal(t, upstream.Run, b.acquire(t, leased).Verdict)
		rate := 2.0
		require.NoError(t, b.lim.Set(b.ctx, b.pool, "transactions", "overridden", upstream.Override{Rate: &rate}))
		require.NoError(t, b.lim.Set(b.ctx, b.pool, "transactions", "cleared", upstream.Override{Rate: &rate}))
		require.NoError(t, b.lim.Set(b.ctx, b.pool, "transactions", "cleared", upstream.Override{Clear: true}))
		_, err := b.pool.Exec(b.ctx, "INSERT INTO "+pgx.Identifier{b.schema, upstream.PlacesTable}.Sanitize()+
			` (task, key, job_id, deferred, updated_at) VALUES ('transactions', 'waiting', 9001, true, now() - interval '1 hour'),
			('transactions', 'idle', 9002, true, now() - interval '8 days')`)
		require.NoError(t, err)
		idle(t, b, 8, "transactions", "idle", "overridden", "cleared", "waiting", "held", "leased")
		idle(t, b, 8, "invoices", "idle")
		idle(t, b, 1, "transactions", "fresh")

		// A monthly task's two cycles (62 days) keep keys idle 8 days.
		n, err := b.lim.Prune(b.ctx, b.pool, "transactions", upstream.PruneAfter(31*24*time.Hour), 100)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, 7*24*time.Hour, upstream.PruneAfter(0))

		// A sync deciding holds "held": the prune skips it.
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		defer tx.Rollback(b.ctx) //nolint:errcheck // no-op after commit
		_, err = tx.Exec(b.ctx, "SELECT 1 FROM "+pgx.Identifier{b.schema, upstream.Table}.Sanitize()+" WHERE task = 'transactions' AND key = 'held' FOR UPDATE")
		require.NoError(t, err)
		n, err = b.lim.Prune(b.ctx, b.pool, "transactions", upstream.PruneAfter(0), 100)
		require.NoError(t, err)
		require.Equal(t, 2, n, "the idle key and the one whose override was cleared")
		require.Equal(t, []string{"invoices/idle", "transactions/fresh", "transactions/held", "transactions/leased", "transactions/overridden", "transactions/waiting"}, keys(t, b))
		var places []int64
		rows, err := b.pool.Query(b.ctx, "SELECT job_id FROM "+pgx.Identifier{b.schema, upstream.PlacesTable}.Sanitize()+" ORDER BY 1")
		require.NoError(t, err)
		places, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Equal(t, []int64{9001}, places, "the pruned key's place went with it")
		require.NoError(t, tx.Commit(b.ctx))

		n, err = b.lim.Prune(b.ctx, b.pool, "transactions", upstream.PruneAfter(0), 100)
		require.NoError(t, err)
		require.Equal(t, 1, n, "no longer held")
		st, err := b.lim.List(b.ctx, b.pool, "transactions", "", 100)
		require.NoError(t, err)
		require.Len(t, st, 4)
		require.Equal(t, "overridden", st[2].Key)
		require.NotNil(t, st[2].Rate, "the override is listed")

		// A pruned key's next sync makes its row again.
		require.Equal(t, upstream.Run, b.acquire(t, b.req("idle", limits)).Verdict)
	})

	t.Run("ByTheTasksDecisions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		table := pgx.Identifier{b.schema, upstream.Table}.Sanitize()
		_, err := b.pool.Exec(b.ctx, "INSERT INTO "+table+` (task, key, updated_at) VALUES
			('transactions', 'gone', now() - interval '8 days'), ('transactions', 'recent', now() - interval '6 days')`)
		require.NoError(t, err)
		require.Equal(t, upstream.Run, b.acquire(t, b.req("bank-1", upstream.Limits{})).Verdict)
		require.Equal(t, []string{"transactions/bank-1", "transactions/recent"}, keys(t, b), "pruned by the task's first decision on this node")
	})
}
