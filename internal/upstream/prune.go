package upstream

import (
	"context"
	"sync"
	"time"
)

// PruneIdle is how long a key's row stays after the last sync that asked
// the limiter about it (or, for a task whose Request.Cycle is longer than
// half of it, two cycles): a key idle longer is deleted (Prune).
const PruneIdle = 7 * 24 * time.Hour

// PruneBatch is the most keys one Prune deletes.
const PruneBatch = 500

// pruneEvery is how often a node prunes a task's keys, from the task's
// syncs' decisions (Acquire, Batcher.Acquire).
const pruneEvery = time.Hour

// pruneTimeout bounds the prune a sync's decision runs.
const pruneTimeout = 10 * time.Second

// pruned is when this process last pruned each task's keys, by tables and
// task.
var pruned struct {
	mu   sync.Mutex
	last map[[2]string]time.Time
}

// PruneAfter is how long a key of a task whose cycle is cycle (zero: not
// known) stays idle before Prune deletes it: PruneIdle or two cycles, the
// longer, so that a key synced once a cycle (a monthly task's bank of one
// account) keeps its row and counters from one cycle to the next.
func PruneAfter(cycle time.Duration) time.Duration {
	return max(PruneIdle, 2*cycle)
}

// Prune deletes at most limit keys of task that no sync asked the limiter
// about (nor an operator changed) for longer than idle, with their places
// in line, and returns how many it deleted. A key whose row the limiter
// still needs is kept: one with an operator's override (a rate, burst or
// concurrency in riverslot_upstream_limits; the override stays listed),
// with a live lease, or with a place in line or a deferral touched within
// idle. A key's next sync makes its row again, with its override.
//
// It takes each key's row lock as a decision does, skipping the rows
// another transaction holds (a sync deciding, an outcome being recorded,
// an operator's change): those are in use. A row changed between the
// statement's start and its lock is checked again as changed, so a key a
// sync just asked about is never deleted. One statement; call it again
// while it returns limit.
//
//	WITH c AS (SELECT task, key FROM riverslot_upstream u WHERE task = $1
//		AND updated_at < clock_timestamp() - idle AND <no live lease, override or recent place>
//		LIMIT $3 FOR UPDATE SKIP LOCKED), ...
//	DELETE FROM riverslot_upstream u USING c WHERE u.task = c.task AND u.key = c.key
func (l *Limiter) Prune(ctx context.Context, db DB, task string, idle time.Duration, limit int) (int, error) {
	var n int
	err := db.QueryRow(ctx, `WITH c AS (
	SELECT u.task, u.key FROM `+l.table+` u
	WHERE u.task = $1 AND u.updated_at < clock_timestamp() - $2 * interval '1 microsecond'
		AND NOT EXISTS (SELECT 1 FROM jsonb_each_text(u.leases) e WHERE e.value::float8 > extract(epoch FROM clock_timestamp()))
		AND NOT EXISTS (SELECT 1 FROM `+l.limits+` o WHERE o.task = u.task AND o.key = u.key
			AND (o.rate IS NOT NULL OR o.burst IS NOT NULL OR o.concurrency IS NOT NULL))
		AND NOT EXISTS (SELECT 1 FROM `+l.places+` p WHERE p.task = u.task AND p.key = u.key
			AND greatest(coalesce(p.reserved_at, p.updated_at), p.updated_at) >= clock_timestamp() - $2 * interval '1 microsecond')
	LIMIT $3
	FOR UPDATE OF u SKIP LOCKED),
p AS (DELETE FROM `+l.places+` p USING c WHERE p.task = c.task AND p.key = c.key),
d AS (DELETE FROM `+l.table+` u USING c WHERE u.task = c.task AND u.key = c.key RETURNING 1)
SELECT count(*) FROM d`, task, idle.Microseconds(), limit).Scan(&n)
	return n, wrap(err, "pruning the idle upstreams")
}

// maybePrune prunes r's task's idle keys (one batch of PruneBatch) when
// this process has not in the last pruneEvery: the syncs' own decisions
// are the limiter's periodic path, so every task that still runs has its
// keys pruned, at no cost to a task that does not. An error leaves the
// keys for the next try.
func (l *Limiter) maybePrune(ctx context.Context, db DB, r Request) {
	k, now := [2]string{l.table, r.Task}, time.Now()
	pruned.mu.Lock()
	if last, ok := pruned.last[k]; ok && now.Sub(last) < pruneEvery {
		pruned.mu.Unlock()
		return
	}
	if pruned.last == nil {
		pruned.last = map[[2]string]time.Time{}
	}
	pruned.last[k] = now
	pruned.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pruneTimeout)
	defer cancel()
	_, _ = l.Prune(ctx, db, r.Task, PruneAfter(r.Cycle), PruneBatch)
}
