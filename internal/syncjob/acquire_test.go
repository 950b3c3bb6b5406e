package syncjob_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/internal/upstream"
)

// TestAcquireWaitsForALeaseInProcess: a sync held only by its upstream's
// in-flight limit asks again in process when it holds one of the node's
// in-process places: while the lease stays taken it gives up only after
// the retries' whole budget (20+40+80+160+200+200+200 ms), and when the
// lease is given back meanwhile it runs. Without a place it returns the
// first decision, a wait, at once.
func TestAcquireWaitsForALeaseInProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	lim := upstream.New(schema)
	w := syncjob.NewTestWorker(pool)
	limits := upstream.Limits{Concurrency: 1}.WithDefaults()
	req := func(id int64) upstream.Request {
		return upstream.Request{Task: "transactions", Key: "bank-1", JobID: id, Limits: limits, Hold: time.Minute}
	}
	holder := req(1)
	d, err := lim.Acquire(ctx, pool, holder)
	require.NoError(t, err)
	require.Equal(t, upstream.Run, d.Verdict)

	d, err = w.Acquire(ctx, lim, req(2), false)
	require.NoError(t, err)
	require.Equal(t, upstream.Wait, d.Verdict, "no in-process place: the first decision")
	require.Equal(t, upstream.WaitConcurrency, d.Reason)

	began := time.Now()
	d, err = w.Acquire(ctx, lim, req(3), true)
	require.NoError(t, err)
	require.Equal(t, upstream.Wait, d.Verdict, "the lease stayed taken")
	require.GreaterOrEqual(t, time.Since(began), 900*time.Millisecond, "it asked again in process, for the retries' whole budget")

	// The lease is given back as soon as job 4's first decision is
	// recorded (its place in riverslot_upstream_place): it runs.
	jobs := pgx.Identifier{schema, upstream.PlacesTable}.Sanitize()
	released := make(chan error, 1)
	go func() {
		for {
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+jobs+" WHERE job_id = 4").Scan(&n); err != nil {
				released <- err
				return
			}
			if n > 0 {
				_, err := lim.Release(ctx, pool, holder, upstream.Succeeded, 0)
				released <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	d, err = w.Acquire(ctx, lim, req(4), true)
	require.NoError(t, err)
	require.NoError(t, <-released)
	require.Equal(t, upstream.Run, d.Verdict, "the lease freed while it waited in process")
}
