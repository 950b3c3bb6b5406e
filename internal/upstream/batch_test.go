package upstream_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
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

func (g *gatedDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	g.queries.Add(1)
	g.first.Do(func() { <-g.open })
	return g.DB.Query(ctx, sql, args...)
}

// row reads the key's in_flight counter (what the fast path admits by,
// beside the leases State counts) and its rate's start clock.
func (b *bundle) row(t *testing.T, key string) (inFlight int, startTAT *time.Time) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT in_flight, start_tat FROM `+pgx.Identifier{b.schema, upstream.Table}.Sanitize()+
		` WHERE task = 'transactions' AND key = $1`, key).Scan(&inFlight, &startTAT))
	return inFlight, startTAT
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
	require.Eventually(t, func() bool { return bat.Pending(b.lim, "transactions", release) == len(rs)-1 }, 10*time.Second, time.Millisecond,
		"the other calls line up behind the first")
	close(db.open)
	wg.Wait()
	return out
}

// TestBatcherGroupsStatements: syncs of a task that ask while a statement
// of theirs runs go together in the next one, whatever their upstream (two
// statements for 40 decisions over two upstreams, two for 40 successes),
// with the state as if each had gone alone: 20 leases each, then none,
// and every call counted.
func TestBatcherGroupsStatements(t *testing.T) {
	t.Parallel()
	b := setup(t)
	upstream.Pruned(b.lim, "transactions") // the hourly prune's statement is not the batch's
	limits := upstream.Limits{Rate: 1000, Burst: 100, Concurrency: 100, FailureThreshold: 5}
	rs := make([]upstream.Request, 40)
	for i := range rs {
		rs[i] = b.req([]string{"bank-a", "bank-b"}[i%2], limits)
	}
	// The keys' rows exist before (their first syncs create them).
	for _, key := range []string{"bank-a", "bank-b"} {
		warm := b.req(key, limits)
		require.Equal(t, upstream.Run, b.acquire(t, warm).Verdict)
		b.release(t, warm, upstream.Succeeded, 0)
	}

	var bat upstream.Batcher
	db := &gatedDB{DB: b.pool, open: make(chan struct{})}
	decisions := batchRun(t, b, &bat, db, rs, false, func(r upstream.Request) upstream.Decision {
		d, err := bat.Acquire(b.ctx, b.lim, db, r)
		assert.NoError(t, err) // not require: in the call's goroutine
		return d
	})
	for i, d := range decisions {
		require.Equal(t, upstream.Decision{Verdict: upstream.Run}, d, "sync %d", i)
	}
	require.EqualValues(t, 2, db.queries.Load(), "one statement for the first, one for the 39 behind it")
	for _, key := range []string{"bank-a", "bank-b"} {
		require.Equal(t, 20, b.state(t, key).InFlight, "leases")
		n, _ := b.row(t, key)
		require.Equal(t, 20, n, "in_flight")
	}

	db = &gatedDB{DB: b.pool, open: make(chan struct{})}
	batchRun(t, b, &bat, db, rs, true, func(r upstream.Request) error {
		_, err := bat.Release(b.ctx, b.lim, db, r, upstream.Succeeded, 0)
		assert.NoError(t, err)
		return err
	})
	require.EqualValues(t, 2, db.queries.Load())
	for _, key := range []string{"bank-a", "bank-b"} {
		s := b.state(t, key)
		require.Equal(t, 0, s.InFlight, key)
		require.EqualValues(t, 21, s.Calls, key)
		n, _ := b.row(t, key)
		require.Zero(t, n, "in_flight")
	}
}

// TestBatcherHoldsTheLimits: an upstream without room for its syncs of a
// batch at once has them decided one by one, so a batch never admits more
// than the limits: with a burst of 10 at one sync every 10 s, 10 of 11
// syncs start at once and the 11th is held, and after 10 that fit the
// next is held too (the start clock moved by 10 intervals); with 3 in
// flight at most, 3 of 10 run. Another upstream's syncs in the same batch that fit are admitted
// together all the same.
func TestBatcherHoldsTheLimits(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		limits upstream.Limits
		n, run int
	}{
		{"burst", upstream.Limits{Rate: 0.1, Burst: 10}, 11, 10},
		{"burst fits", upstream.Limits{Rate: 0.1, Burst: 10}, 10, 10},
		{"concurrency", upstream.Limits{Concurrency: 3}, 10, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			upstream.Pruned(b.lim, "transactions") // the hourly prune's statement is not the batch's
			// The keys' rows exist, their clocks untouched; bank-b's
			// limits (an operator's override) are far above.
			_, err := b.pool.Exec(b.ctx, `INSERT INTO `+pgx.Identifier{b.schema, upstream.Table}.Sanitize()+` (task, key, rate, burst, concurrency)
VALUES ('transactions', 'bank-a', NULL, NULL, NULL), ('transactions', 'bank-b', 1000, 1000, 1000)`)
			require.NoError(t, err)
			rs := make([]upstream.Request, tt.n, tt.n+4)
			for i := range rs {
				rs[i] = b.req("bank-a", tt.limits)
			}
			for range 4 {
				rs = append(rs, b.req("bank-b", tt.limits))
			}
			var bat upstream.Batcher
			db := &gatedDB{DB: b.pool, open: make(chan struct{})}
			decisions := batchRun(t, b, &bat, db, rs, false, func(r upstream.Request) upstream.Decision {
				d, err := bat.Acquire(b.ctx, b.lim, db, r)
				require.NoError(t, err)
				return d
			})
			run := map[string]int{}
			for i, d := range decisions {
				if d.Verdict == upstream.Run && d.Delay == 0 {
					run[rs[i].Key]++
				}
			}
			require.Equal(t, map[string]int{"bank-a": tt.run, "bank-b": 4}, run, "syncs started at once: %+v", decisions)
			n, _ := b.row(t, "bank-a")
			require.Equal(t, tt.run, n, "bank-a's in_flight")
			if tt.limits.Rate > 0 {
				next := b.acquire(t, b.req("bank-a", tt.limits))
				require.False(t, next.Verdict == upstream.Run && next.Delay == 0, "the burst is spent: %+v", next)
			}
			if tt.n == tt.run {
				require.EqualValues(t, 2, db.queries.Load(), "a batch that fits goes in one statement")
			} else {
				require.EqualValues(t, 2+tt.n-1, db.queries.Load(), "bank-a's syncs of the batch decide alone, bank-b's do not")
			}
		})
	}
}
