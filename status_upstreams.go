package riverslot

import (
	"context"
	"errors"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/upstream"
)

// UpstreamsStatus is a task's upstreams at a glance.
type UpstreamsStatus struct {
	// Keys is how many upstreams synced or were given limits; NotClosed
	// how many have a breaker open or half-open.
	Keys, NotClosed int
	// Top are the UpstreamsTop that most need a look: breaker not closed
	// first, then paused (a 429), then by syncs skipped, then by syncs
	// throttled. The whole list: Scheduler.Upstreams.
	Top []UpstreamStatus
	// TaskLimitsUnknown is set when the scheduler's task sets neither
	// Upstream nor Limits although the limiter holds upstreams of it: a
	// task rebuilt from the ledger, as riverslot status and riverslot web
	// build it, which cannot know the app's Limits (or a task whose app
	// dropped them). An upstream's RateLimit and ConcurrencyLimit without
	// an override (Rate, Concurrency nil) are then the task's defaults,
	// not known here, rather than no limit.
	TaskLimitsUnknown bool
}

// UpstreamsTop is how many upstreams Status shows.
const UpstreamsTop = 10

// UpstreamStatus is one upstream with the limits in force: an operator's
// override, else the task's Limits (0: none; unknown when
// UpstreamsStatus.TaskLimitsUnknown).
type UpstreamStatus struct {
	UpstreamState
	RateLimit        float64
	ConcurrencyLimit int
}

// upstreams reads the task's upstreams from the limiter's tables (nil when
// it holds none of the task). It reads them for a task without Upstream or
// Limits too: the limiter's state and overrides are the app's, and a
// scheduler of riverslot status or riverslot web rebuilds the task from
// the ledger, without them.
func (s *Scheduler) upstreams(ctx context.Context, spec *taskspec.Spec) (*UpstreamsStatus, error) {
	keys, notClosed, top, err := upstream.New(s.riverSchema).Summary(ctx, s.pool, spec.Name, UpstreamsTop)
	switch {
	case errors.Is(err, upstream.ErrMissing):
		return nil, nil // Check reports the missing tables
	case err != nil:
		return nil, err
	case keys == 0:
		return nil, nil
	}
	out := &UpstreamsStatus{Keys: keys, NotClosed: notClosed, TaskLimitsUnknown: !spec.UsesUpstreamLimiter()}
	for _, st := range top {
		u := UpstreamStatus{UpstreamState: UpstreamState(st), RateLimit: spec.Limits.Rate, ConcurrencyLimit: spec.Limits.Concurrency}
		if st.Rate != nil {
			u.RateLimit = *st.Rate
		}
		if st.Concurrency != nil {
			u.ConcurrencyLimit = *st.Concurrency
		}
		out.Top = append(out.Top, u)
	}
	return out, nil
}
