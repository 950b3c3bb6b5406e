package upstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Batcher groups the decisions and outcomes that one node's syncs of a
// task ask for at the same moment into one statement each, the way a
// database groups commits: the first sync to ask runs its statement at
// once, alone; syncs that ask while it runs, of any upstream of the task,
// wait for it and then go together in the next statement. A quiet task
// pays nothing (no sync waits for a batch to fill), and a busy one sends
// one statement for many syncs instead of two per sync: a statement costs
// about as much for one sync as for sixteen, so the statements, not the
// rows, are most of what the limiter costs when limits are high.
//
// Only the common cases are batched: an upstream's syncs in a batch are
// admitted together only when it has room for all of them at once (the
// fast path's rule, for the group: the rate's start clock, its burst and
// the in-flight limit); otherwise each decides alone, as without a
// Batcher. Only successes are released together; failures, throttles and
// neutral ends change the breaker and go alone. A statement locks its
// upstreams' rows in key order, so that two nodes' batches cannot
// deadlock.
//
// The zero Batcher is ready to use; it must not be copied after first
// use. One per node (the sync worker holds it).
type Batcher struct {
	mu     sync.Mutex
	queues map[batchKey]*batchQueue
}

// MaxBatch is the most syncs one batched statement decides or releases.
const MaxBatch = 256

// batchTimeout bounds a batched statement: it runs for syncs other than
// the one whose context it started under.
const batchTimeout = 10 * time.Second

type batchKey struct {
	table, task string
	release     bool
}

type batchQueue struct {
	running bool
	pending []*batchCall
}

type batchCall struct {
	r Request
	// done receives the outcome of the batch the call went in, or, for
	// the first call of the next batch, that batch to run (lead).
	done chan batchResult
}

type batchResult struct {
	ok   bool // admitted (Acquire) or recorded (Release)
	rel  Released
	err  error
	lead []*batchCall
}

// batchRun runs one batch; ok and rel are per request.
type batchRun func(ctx context.Context, rs []Request) (ok []bool, rel []Released, err error)

// Acquire is Limiter.Acquire, batched with the node's other syncs of the
// task that ask at the same moment.
func (b *Batcher) Acquire(ctx context.Context, l *Limiter, db DB, r Request) (Decision, error) {
	res := b.do(ctx, batchKey{table: l.table, task: r.Task}, r, func(ctx context.Context, rs []Request) ([]bool, []Released, error) {
		ok, err := l.fastMany(ctx, db, rs)
		return ok, nil, err
	})
	if res.err != nil {
		// Not decided again alone: the statement may have committed
		// before its answer was lost, and a second decision would take a
		// second lease.
		return Decision{}, res.err
	}
	if res.ok {
		l.maybePrune(ctx, db, r)
		return Decision{Verdict: Run}, nil
	}
	// Its upstream had no room for its group at once: decide alone, with
	// the whole rule.
	return l.Acquire(ctx, db, r)
}

// Release is Limiter.Release, batched for successes with the node's other
// successful syncs of the task that end at the same moment.
func (b *Batcher) Release(ctx context.Context, l *Limiter, db DB, r Request, outcome Outcome, retryAfter time.Duration) (Released, error) {
	if outcome != Succeeded {
		return l.Release(ctx, db, r, outcome, retryAfter)
	}
	res := b.do(ctx, batchKey{table: l.table, task: r.Task, release: true}, r, func(ctx context.Context, rs []Request) ([]bool, []Released, error) {
		return l.releaseSucceeded(ctx, db, rs)
	})
	return res.rel, res.err
}

// do runs r in the next batch of k. The first caller while no batch runs
// leads: it runs its batch, then hands the calls that queued meanwhile to
// the first of them, which runs them as the next batch; so no caller runs
// more than one batch.
func (b *Batcher) do(ctx context.Context, k batchKey, r Request, run batchRun) batchResult {
	c := &batchCall{r: r, done: make(chan batchResult, 1)}
	b.mu.Lock()
	if b.queues == nil {
		b.queues = map[batchKey]*batchQueue{}
	}
	q := b.queues[k]
	if q == nil {
		q = &batchQueue{}
		b.queues[k] = q
	}
	if q.running {
		q.pending = append(q.pending, c)
		b.mu.Unlock()
		res := <-c.done
		if res.lead == nil {
			return res
		}
		return b.lead(ctx, k, q, c, res.lead, run)
	}
	q.running = true
	b.mu.Unlock()
	return b.lead(ctx, k, q, c, []*batchCall{c}, run)
}

// runSafely runs a batch under its own deadline, a panic turned into an
// error so that the calls waiting for it and the queue behind it go on.
func runSafely(ctx context.Context, run batchRun, rs []Request) (ok []bool, rel []Released, err error) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			ok, rel, err = nil, nil, fmt.Errorf("riverslot: a batch of upstream decisions panicked: %v", p)
		}
	}()
	ok, rel, err = run(bctx, rs)
	if err == nil && (len(ok) != len(rs) || rel != nil && len(rel) != len(rs)) {
		err = fmt.Errorf("riverslot: a batch of %d upstream decisions answered %d (a bug)", len(rs), len(ok))
	}
	return ok, rel, err
}

// lead runs batch (c's, c first), delivers its results to the others, and
// hands the calls queued meanwhile to the next leader.
func (b *Batcher) lead(ctx context.Context, k batchKey, q *batchQueue, c *batchCall, batch []*batchCall, run batchRun) batchResult {
	rs := make([]Request, len(batch))
	for i, bc := range batch {
		rs[i] = bc.r
	}
	ok, rel, err := runSafely(ctx, run, rs)

	b.mu.Lock()
	var next []*batchCall
	if n := min(len(q.pending), MaxBatch); n > 0 {
		next = q.pending[:n:n]
		q.pending = q.pending[n:]
	} else {
		q.running = false
		delete(b.queues, k)
	}
	b.mu.Unlock()

	var mine batchResult
	for i, bc := range batch {
		res := batchResult{err: err}
		if err == nil {
			res.ok = ok[i]
			if rel != nil {
				res.rel = rel[i]
			}
		}
		if bc == c {
			mine = res
		} else {
			bc.done <- res
		}
	}
	if next != nil {
		next[0].done <- batchResult{lead: next}
	}
	return mine
}

// fastMany is fast for rs, syncs of one task with the same limits and
// hold, each upstream's all or none: it admits an upstream's syncs
// together when it has room for every one of them at once (as many fast
// decisions in a row would), taking a lease for each, and reports which
// were admitted.
func (l *Limiter) fastMany(ctx context.Context, db DB, rs []Request) ([]bool, error) {
	ok := make([]bool, len(rs))
	if len(rs) == 1 {
		var err error
		ok[0], err = l.fast(ctx, db, rs[0])
		return ok, err
	}
	r := rs[0]
	keys, ids := make([]string, len(rs)), make([]int64, len(rs))
	for i, x := range rs {
		if x.Task != r.Task || x.Limits != r.Limits || x.Hold != r.Hold {
			return ok, nil // not one group: each decides alone
		}
		keys[i], ids[i] = x.Key, x.JobID
	}
	rows, err := db.Query(ctx, `WITH g AS (
	SELECT key, count(*)::int AS k, array_agg(id) AS ids,
		jsonb_object_agg(id::text, extract(epoch FROM clock_timestamp()) + $8::float8 / 1e6) AS add
	FROM unnest($2::text[], $3::bigint[]) AS x(key, id) GROUP BY key),
l AS (SELECT u.key FROM `+l.table+` u WHERE u.task = $1 AND u.key IN (SELECT key FROM g) ORDER BY u.key FOR UPDATE),
w AS (
	UPDATE `+l.table+` u SET
		start_tat = CASE WHEN coalesce(rate, $4) > 0
			THEN greatest(coalesce(start_tat, clock_timestamp()), clock_timestamp()) + (g.k * 1e6 / coalesce(rate, $4)) * interval '1 microsecond'
			ELSE start_tat END,
		in_flight = in_flight + g.k,
		leases = leases || g.add,
		updated_at = clock_timestamp()
	FROM g
	WHERE u.task = $1 AND u.key = g.key
		AND (SELECT count(*) FROM l) >= 0 -- every row locked first, in key order
		AND (paused_until IS NULL OR paused_until <= clock_timestamp())
		AND ($6 = 0 OR state = 'closed')
		AND CASE WHEN coalesce(rate, $4) <= 0 THEN true ELSE
			(line_tat IS NULL OR line_tat <= clock_timestamp())
			AND greatest(coalesce(start_tat, clock_timestamp()), clock_timestamp())
				+ (g.k - greatest(coalesce(burst, $5), 1)) * (1e6 / coalesce(rate, $4)) * interval '1 microsecond' <= clock_timestamp() END
		AND (coalesce(concurrency, $7) = 0 OR in_flight + g.k <= coalesce(concurrency, $7))
		AND NOT EXISTS (SELECT 1 FROM `+l.places+` j WHERE j.task = $1 AND j.key = g.key AND j.job_id = ANY(g.ids))
	RETURNING u.key)
SELECT key FROM w`, r.Task, keys, ids, r.Limits.Rate, r.Limits.Burst, r.Limits.FailureThreshold, r.Limits.Concurrency, r.Hold.Microseconds())
	if err != nil {
		return ok, wrap(err, "deciding syncs with their upstreams")
	}
	admitted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return ok, wrap(err, "deciding syncs with their upstreams")
	}
	for i, x := range rs {
		ok[i] = slices.Contains(admitted, x.Key)
	}
	return ok, nil
}

// releaseSucceeded is Release of rs, successful syncs of one task, in one
// statement.
func (l *Limiter) releaseSucceeded(ctx context.Context, db DB, rs []Request) ([]bool, []Released, error) {
	ok, rel := make([]bool, len(rs)), make([]Released, len(rs))
	if len(rs) == 1 {
		var err error
		rel[0], err = l.Release(ctx, db, rs[0], Succeeded, 0)
		ok[0] = err == nil
		return ok, rel, err
	}
	r := rs[0]
	keys, ids := make([]string, len(rs)), make([]int64, len(rs))
	for i, x := range rs {
		if x.Task != r.Task {
			return nil, nil, errors.New("riverslot: a batch of releases mixes tasks (a bug)")
		}
		keys[i], ids[i] = x.Key, x.JobID
	}
	rows, err := db.Query(ctx, `WITH g AS (
	SELECT key, count(*)::int AS k, array_agg(id) AS ids, array_agg(id::text) AS tids
	FROM unnest($2::text[], $3::bigint[]) AS x(key, id) GROUP BY key),
l AS (SELECT u.key FROM `+l.table+` u WHERE u.task = $1 AND u.key IN (SELECT key FROM g) ORDER BY u.key FOR UPDATE),
j AS (DELETE FROM `+l.places+` x USING g WHERE x.task = $1 AND x.key = g.key AND x.job_id = ANY(g.ids))
UPDATE `+l.table+` u SET
	calls = calls + g.k,
	win_calls = CASE WHEN win_start IS NULL OR clock_timestamp() - win_start >= interval '10 seconds' THEN g.k ELSE win_calls + g.k END,
	last_rate = CASE WHEN win_start IS NOT NULL AND clock_timestamp() - win_start >= interval '10 seconds'
		THEN win_calls / extract(epoch FROM clock_timestamp() - win_start)::float8 ELSE last_rate END,
	win_start = CASE WHEN win_start IS NULL OR clock_timestamp() - win_start >= interval '10 seconds' THEN clock_timestamp() ELSE win_start END,
	in_flight = greatest(in_flight - (SELECT count(*) FROM unnest(g.tids) id WHERE u.leases ? id), 0),
	leases = leases - g.tids,
	failures = 0,
	state = CASE WHEN state = 'half_open' AND probe_job = ANY(g.ids) THEN 'closed' ELSE state END,
	closed_at = CASE WHEN state = 'half_open' AND probe_job = ANY(g.ids) THEN clock_timestamp() ELSE closed_at END,
	probe_until = CASE WHEN probe_job = ANY(g.ids) THEN NULL ELSE probe_until END,
	probe_job = CASE WHEN probe_job = ANY(g.ids) THEN NULL ELSE probe_job END,
	updated_at = clock_timestamp()
FROM g
WHERE u.task = $1 AND u.key = g.key AND (SELECT count(*) FROM l) >= 0
RETURNING u.key, u.state = 'open', u.open_until, clock_timestamp()`, r.Task, keys, ids)
	if err != nil {
		return nil, nil, wrap(err, "recording the syncs' outcomes for their upstreams")
	}
	byKey := map[string]Released{}
	var (
		key string
		x   Released
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &x.Open, &x.OpenUntil, &x.Now}, func() error {
		byKey[key] = x
		x.OpenUntil = nil // scanned into anew, not through the pointer kept
		return nil
	})
	if err != nil {
		return nil, nil, wrap(err, "recording the syncs' outcomes for their upstreams")
	}
	for i, x := range rs {
		// A key whose row is gone (dropped by hand) has nothing to record,
		// as for Release.
		ok[i], rel[i] = true, byKey[x.Key]
	}
	return ok, rel, nil
}
