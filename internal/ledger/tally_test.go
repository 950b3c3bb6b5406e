package ledger_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestHistogram checks the lateness histogram's buckets against their
// definition (bucket i holds [10^(-3+(i-1)/10), 10^(-3+i/10)) seconds) and
// its quantiles against samples whose quantiles are known.
func TestHistogram(t *testing.T) {
	t.Parallel()

	bucketOf := func(d time.Duration) int {
		var h ledger.Histogram
		h.Add(d)
		for i, c := range h {
			if c == 1 {
				return i
			}
		}
		t.Fatalf("%s counted nowhere", d)
		return -1
	}
	require.Equal(t, 0, bucketOf(-time.Second), "an early start counts as on time")
	require.Equal(t, 0, bucketOf(999*time.Microsecond))
	require.Equal(t, 1, bucketOf(time.Millisecond))
	for i := 1; i < ledger.LatenessBuckets-1; i++ {
		lo := time.Duration(math.Pow(10, -3+float64(i-1)/10) * float64(time.Second))
		hi := time.Duration(math.Pow(10, -3+float64(i)/10) * float64(time.Second))
		require.Equal(t, i, bucketOf(lo), "the lower bound of bucket %d", i)
		require.Equal(t, i, bucketOf(hi-time.Nanosecond), "just under the upper bound of bucket %d", i)
	}
	require.Equal(t, ledger.LatenessBuckets-1, bucketOf(3*time.Hour), "10,000 s and more")

	var h ledger.Histogram
	_, known := h.Quantile(0.5)
	require.False(t, known, "nothing counted: unknown, not zero")
	// 900 syncs 100 ms late, 100 syncs 5 s late.
	for range 900 {
		h.Add(100 * time.Millisecond)
	}
	for range 100 {
		h.Add(5 * time.Second)
	}
	require.EqualValues(t, 1000, h.Count())
	p50, known := h.Quantile(0.5)
	require.True(t, known)
	require.InEpsilon(t, 0.1, p50.Seconds(), 0.26, "p50 in 100 ms's bucket")
	p99, _ := h.Quantile(0.99)
	require.InEpsilon(t, 5, p99.Seconds(), 0.26, "p99 in 5 s's bucket")
	require.Less(t, p50, p99)
}

// TestTallyMissingLedger: counts for a schema whose ledger does not exist
// (an app that has not run Migrate) are dropped with ErrMissing, not kept
// and retried forever; counts for a ledger that exists are written.
func TestTallyMissingLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	empty := riverslottest.EmptySchema(ctx, t, pool)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	led := ledger.New(schema)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = led.ClaimBootstrap(ctx, tx, "reports", "120s/8/1", start, 1)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	tally := ledger.Tally{Exec: func(ctx context.Context, sql string, args ...any) error {
		_, err := pool.Exec(ctx, sql, args...)
		return err
	}}
	key := ledger.CycleKey{Task: "reports", Plan: "120s/8/1", Start: start}
	tally.Add(empty, key, ledger.OutcomeSynced, time.Second)
	tally.Add(schema, key, ledger.OutcomeSynced, time.Second)
	tally.Add(schema, key, ledger.OutcomeStale, 0)
	require.ErrorIs(t, tally.Flush(ctx), ledger.ErrMissing)
	require.NoError(t, tally.Flush(ctx), "the missing ledger's counts were dropped, the others written")

	var synced, stale int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT synced, stale FROM "+pgx.Identifier{schema, ledger.Table}.Sanitize()+" WHERE task = 'reports' AND slot = -1").Scan(&synced, &stale))
	require.EqualValues(t, 1, synced)
	require.EqualValues(t, 1, stale)
}
