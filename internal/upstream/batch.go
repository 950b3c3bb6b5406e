package upstream

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Batcher groups the decisions and outcomes that one node's syncs of one
// upstream ask for at the same moment into one statement each, the way a
// database groups commits: the first sync to ask runs its statement at
// once, alone; syncs that ask while it runs wait for it and then go
// together in the next statement. A quiet upstream pays nothing (no
// sync waits for a batch to fill), and a busy one takes its key's row
// lock once for many syncs instead of twice per sync, which is most of
// what the limiter costs when limits are high.
//
// Only the common cases are batched: a group of syncs is admitted
// together only when the upstream has room for all of them at once (the
// fast path's rule, for the group: the rate's start clock, its burst and
// the in-flight limit); otherwise each asks alone, in the order they
// came, as without a Batcher. Only successes are released together;
// failures, throttles and neutral ends change the breaker and go alone.
//
// The zero Batcher is ready to use; it must not be copied after first
// use. One per node (the sync worker holds it).
type Batcher struct {
	mu     sync.Mutex
	queues map[batchKey]*batchQueue
}

// MaxBatch is the most syncs one batched statement decides or releases.
const MaxBatch = 64

// batchTimeout bounds a batched statement: it runs for syncs other than
// the one whose context it started under.
const batchTimeout = 10 * time.Second

type batchKey struct {
	table, task, key string
	release          bool
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

// Acquire is Limiter.Acquire, batched with the node's other syncs of the
// same upstream that ask at the same moment.
func (b *Batcher) Acquire(ctx context.Context, l *Limiter, db DB, r Request) (Decision, error) {
	res := b.do(ctx, batchKey{table: l.table, task: r.Task, key: r.Key}, r, func(ctx context.Context, rs []Request) (bool, Released, error) {
		ok, err := l.fastMany(ctx, db, rs)
		return ok, Released{}, err
	})
	if res.err == nil && res.ok {
		return Decision{Verdict: Run}, nil
	}
	// The group did not fit at once (or its statement failed): decide
	// alone, with the whole rule.
	return l.Acquire(ctx, db, r)
}

// Release is Limiter.Release, batched for successes with the node's other
// successful syncs of the same upstream that end at the same moment.
func (b *Batcher) Release(ctx context.Context, l *Limiter, db DB, r Request, outcome Outcome, retryAfter time.Duration) (Released, error) {
	if outcome != Succeeded {
		return l.Release(ctx, db, r, outcome, retryAfter)
	}
	res := b.do(ctx, batchKey{table: l.table, task: r.Task, key: r.Key, release: true}, r, func(ctx context.Context, rs []Request) (bool, Released, error) {
		rel, err := l.releaseSucceeded(ctx, db, rs)
		return err == nil, rel, err
	})
	if res.err != nil && errors.Is(res.err, context.DeadlineExceeded) && ctx.Err() == nil {
		// Another sync's batch timed out: record this one alone.
		return l.Release(ctx, db, r, outcome, retryAfter)
	}
	return res.rel, res.err
}

// do runs r in the next batch of k. The first caller while no batch runs
// leads: it runs its batch, then hands the calls that queued meanwhile to
// the first of them, which runs them as the next batch; so no caller runs
// more than one batch.
func (b *Batcher) do(ctx context.Context, k batchKey, r Request, run func(context.Context, []Request) (bool, Released, error)) batchResult {
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

// lead runs batch (c's, c first), delivers its result to the others, and
// hands the calls queued meanwhile to the next leader.
func (b *Batcher) lead(ctx context.Context, k batchKey, q *batchQueue, c *batchCall, batch []*batchCall, run func(context.Context, []Request) (bool, Released, error)) batchResult {
	rs := make([]Request, len(batch))
	for i, bc := range batch {
		rs[i] = bc.r
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	ok, rel, err := run(bctx, rs)
	cancel()
	res := batchResult{ok: ok, rel: rel, err: err}

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

	for _, bc := range batch {
		if bc != c {
			bc.done <- res
		}
	}
	if next != nil {
		next[0].done <- batchResult{lead: next}
	}
	return res
}

// fastMany is fast for rs, syncs of one task and key with the same limits
// and hold, all or none: it admits them together when the upstream has
// room for every one of them at once (as many fast decisions in a row
// would), taking a lease for each.
func (l *Limiter) fastMany(ctx context.Context, db DB, rs []Request) (bool, error) {
	if len(rs) == 1 {
		return l.fast(ctx, db, rs[0])
	}
	r := rs[0]
	ids := make([]int64, len(rs))
	for i, x := range rs {
		if x.Task != r.Task || x.Key != r.Key || x.Limits != r.Limits || x.Hold != r.Hold {
			return false, nil // not one group: each decides alone
		}
		ids[i] = x.JobID
	}
	var n int
	err := db.QueryRow(ctx, `WITH u AS (
	UPDATE `+l.table+` SET
		start_tat = CASE WHEN coalesce(rate, $4) > 0
			THEN greatest(coalesce(start_tat, clock_timestamp()), clock_timestamp()) + ($9 * 1e6 / coalesce(rate, $4)) * interval '1 microsecond'
			ELSE start_tat END,
		in_flight = in_flight + $9,
		leases = leases || (SELECT jsonb_object_agg(id::text, extract(epoch FROM clock_timestamp()) + $8::float8 / 1e6) FROM unnest($3::bigint[]) id),
		updated_at = clock_timestamp()
	WHERE task = $1 AND key = $2
		AND (paused_until IS NULL OR paused_until <= clock_timestamp())
		AND ($6 = 0 OR state = 'closed')
		AND CASE WHEN coalesce(rate, $4) <= 0 THEN true ELSE
			(line_tat IS NULL OR line_tat <= clock_timestamp())
			AND greatest(coalesce(start_tat, clock_timestamp()), clock_timestamp())
				+ ($9 - greatest(coalesce(burst, $5), 1)) * (1e6 / coalesce(rate, $4)) * interval '1 microsecond' <= clock_timestamp() END
		AND (coalesce(concurrency, $7) = 0 OR in_flight + $9 <= coalesce(concurrency, $7))
		AND NOT EXISTS (SELECT 1 FROM `+l.jobs+` j WHERE j.task = $1 AND j.key = $2 AND j.job_id = ANY($3::bigint[]))
	RETURNING 1)
SELECT count(*) FROM u`, r.Task, r.Key, ids, r.Limits.Rate, r.Limits.Burst, r.Limits.FailureThreshold, r.Limits.Concurrency, r.Hold.Microseconds(), len(rs)).Scan(&n)
	if err != nil {
		return false, wrap(err, "deciding syncs with their upstream")
	}
	return n == 1, nil
}

// releaseSucceeded is Release of rs, successful syncs of one task and key,
// in one statement.
func (l *Limiter) releaseSucceeded(ctx context.Context, db DB, rs []Request) (Released, error) {
	if len(rs) == 1 {
		return l.Release(ctx, db, rs[0], Succeeded, 0)
	}
	r := rs[0]
	ids, keys := make([]int64, len(rs)), make([]string, len(rs))
	for i, x := range rs {
		if x.Task != r.Task || x.Key != r.Key {
			return Released{}, errors.New("riverslot: a batch of releases mixes upstreams (a bug)")
		}
		ids[i], keys[i] = x.JobID, strconv.FormatInt(x.JobID, 10)
	}
	var rel Released
	err := db.QueryRow(ctx, `WITH j AS (DELETE FROM `+l.jobs+` WHERE task = $1 AND key = $2 AND job_id = ANY($3::bigint[]))
UPDATE `+l.table+` u SET
	calls = calls + $4,
	win_calls = CASE WHEN win_start IS NULL OR clock_timestamp() - win_start >= interval '10 seconds' THEN $4 ELSE win_calls + $4 END,
	last_rate = CASE WHEN win_start IS NOT NULL AND clock_timestamp() - win_start >= interval '10 seconds'
		THEN win_calls / extract(epoch FROM clock_timestamp() - win_start)::float8 ELSE last_rate END,
	win_start = CASE WHEN win_start IS NULL OR clock_timestamp() - win_start >= interval '10 seconds' THEN clock_timestamp() ELSE win_start END,
	in_flight = greatest(in_flight - (SELECT count(*) FROM unnest($5::text[]) id WHERE u.leases ? id), 0),
	leases = leases - $5::text[],
	failures = 0,
	state = CASE WHEN state = 'half_open' AND probe_job = ANY($3::bigint[]) THEN 'closed' ELSE state END,
	probe_until = CASE WHEN probe_job = ANY($3::bigint[]) THEN NULL ELSE probe_until END,
	probe_job = CASE WHEN probe_job = ANY($3::bigint[]) THEN NULL ELSE probe_job END,
	updated_at = clock_timestamp()
WHERE task = $1 AND key = $2
RETURNING state = 'open', open_until, clock_timestamp()`, r.Task, r.Key, ids, len(rs), keys).Scan(&rel.Open, &rel.OpenUntil, &rel.Now)
	if errors.Is(err, pgx.ErrNoRows) {
		return Released{}, nil
	}
	return rel, wrap(err, "recording the syncs' outcomes for their upstream")
}
