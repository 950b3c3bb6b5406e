package upstream_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/upstream"
)

// gatedDB counts the statements a Batcher sends and holds the first one
// until open is closed, so that a test can line calls up behind it.
type gatedDB struct {
	upstream.DB
	open    chan struct{}
	first   sync.Once
	queries atomic.Int64
}

func (g *gatedDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	g.queries.Add(1)
	g.first.Do(func() { <-g.open })
	return g.DB.QueryRow(ctx, sql, args...)
}

// batchRun sends n calls of key through do at once, the first alone (its
// statement held open) and the others lined up behind it, and returns
// their results in the order of rs.
func batchRun[T any](t *testing.T, b *bundle, bat *upstream.Batcher, db *gatedDB, rs []upstream.Request, release bool, do func(upstream.Request) T) []T {
	t.Helper()
	out := make([]T, len(rs))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); out[0] = do(rs[0]) }()
	require.Eventually(t, func() bool { return db.queries.Load() == 1 }, 10*time.Second, time.Millisecond, "the first call's statement")
	for i := 1; i < len(rs); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = do(rs[i]) }()
	}
	require.Eventually(t, func() bool { return bat.Pending(b.lim, "transactions", rs[0].Key, release) == len(rs)-1 }, 10*time.Second, time.Millisecond,
		"the other calls line up behind the first")
	close(db.open)
	wg.Wait()
	return out
}

// TestBatcherGroupsStatements: syncs of one upstream that ask while a
// statement of theirs runs go together in the next one (two statements
// for 40 decisions, two for 40 successes), with the state as if each had
// gone alone: 40 leases, then none, and 40 calls counted.
func TestBatcherGroupsStatements(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limits := upstream.Limits{Rate: 1000, Burst: 100, Concurrency: 100, FailureThreshold: 5}
	rs := make([]upstream.Request, 40)
	for i := range rs {
		rs[i] = b.req("bank-a", limits)
	}
	// The key's row exists before (its first sync creates it).
	warm := b.req("bank-a", limits)
	require.Equal(t, upstream.Run, b.acquire(t, warm).Verdict)
	b.release(t, warm, upstream.Succeeded, 0)

	var bat upstream.Batcher
	db := &gatedDB{DB: b.pool, open: make(chan struct{})}
	decisions := batchRun(t, b, &bat, db, rs, false, func(r upstream.Request) upstream.Decision {
		d, err := bat.Acquire(b.ctx, b.lim, db, r)
		require.NoError(t, err)
		return d
	})
	for i, d := range decisions {
		require.Equal(t, upstream.Decision{Verdict: upstream.Run}, d, "sync %d", i)
	}
	require.EqualValues(t, 2, db.queries.Load(), "one statement for the first, one for the 39 behind it")
	require.Equal(t, 40, b.state(t, "bank-a").InFlight)

	db = &gatedDB{DB: b.pool, open: make(chan struct{})}
	batchRun(t, b, &bat, db, rs, true, func(r upstream.Request) error {
		_, err := bat.Release(b.ctx, b.lim, db, r, upstream.Succeeded, 0)
		require.NoError(t, err)
		return err
	})
	require.EqualValues(t, 2, db.queries.Load())
	s := b.state(t, "bank-a")
	require.Equal(t, 0, s.InFlight)
	require.EqualValues(t, 41, s.Calls)
}

// TestBatcherHoldsTheLimits: a group the upstream has no room for at once
// is decided one by one, so a batch never admits more than the limits:
// with a burst of 10 at one sync a second, 10 of 11 syncs start at once
// and the 11th is held; with 3 in flight at most, 3 of 10 run.
func TestBatcherHoldsTheLimits(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		limits upstream.Limits
		n, run int
	}{
		{"burst", upstream.Limits{Rate: 1, Burst: 10}, 11, 10},
		{"burst fits", upstream.Limits{Rate: 1, Burst: 10}, 10, 10},
		{"concurrency", upstream.Limits{Concurrency: 3}, 10, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// The key's row exists, its clocks untouched.
			_, err := b.pool.Exec(b.ctx, `INSERT INTO `+pgx.Identifier{b.schema, upstream.Table}.Sanitize()+` (task, key) VALUES ('transactions', 'bank-a')`)
			require.NoError(t, err)
			rs := make([]upstream.Request, tt.n)
			for i := range rs {
				rs[i] = b.req("bank-a", tt.limits)
			}
			var bat upstream.Batcher
			db := &gatedDB{DB: b.pool, open: make(chan struct{})}
			decisions := batchRun(t, b, &bat, db, rs, false, func(r upstream.Request) upstream.Decision {
				d, err := bat.Acquire(b.ctx, b.lim, db, r)
				require.NoError(t, err)
				return d
			})
			var run int
			for _, d := range decisions {
				if d.Verdict == upstream.Run && d.Delay == 0 {
					run++
				}
			}
			require.Equal(t, tt.run, run, "syncs started at once: %+v", decisions)
			if tt.n == tt.run {
				require.EqualValues(t, 2, db.queries.Load(), "a group that fits goes in one statement")
			}
		})
	}
}
