package riverutil

import (
	"context"

	"github.com/riverslot/riverslot/internal/upstream"
)

// UpstreamOverride changes one upstream's limits at run time: a nil field
// keeps the current override, Clear drops them all (the task's Limits
// apply again). Rate 0 or Concurrency 0 lifts that limit for the key.
type UpstreamOverride = upstream.Override

// UpstreamState is one upstream of a task as the limiter holds it: the
// operator's overrides, the breaker, syncs in flight and waiting in line,
// and counters since the upstream's first sync.
type UpstreamState = upstream.State

// SetUpstreamLimits overrides the limits of the task's upstream key, in
// River's database: every node's next decision for a sync of that
// upstream reads it, no deploy needed. The key need not have synced yet.
// Call it after Configure (it needs River's schema).
func (s *Scheduler) SetUpstreamLimits(ctx context.Context, taskName, key string, o UpstreamOverride) error {
	if _, err := s.spec(taskName); err != nil {
		return err
	}
	return upstream.New(s.riverSchema).Set(ctx, s.pool, taskName, key, o)
}

// Upstreams returns the task's upstreams that synced or were given limits,
// by key, at most limit (1,000 when not positive) after the key after: a
// page of a list that may hold thousands.
func (s *Scheduler) Upstreams(ctx context.Context, taskName, after string, limit int) ([]UpstreamState, error) {
	if _, err := s.spec(taskName); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 1000
	}
	return upstream.New(s.riverSchema).List(ctx, s.pool, taskName, after, limit)
}
