package riverutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ShardsStatus is one cycle of a sharded task over all its shards: each
// shard's Status of the cycle, and the totals.
type ShardsStatus struct {
	Task       string
	CycleStart time.Time // the latest cycle any shard has made
	Shards     []ShardCycle
	// Totals over the shards that answered, for CycleStart: the slots
	// they serve (each slot of the cycle once over a whole fleet) and
	// their counts.
	Slots, SlotsDone, SlotsFailed, BehindSlots int
	AccountsExpected, Enqueued, Synced         int64
	Gone, SkippedStale, SkippedUpstream        int64
	Pending, Running                           int64
	// Unreachable counts the shards whose database did not answer: they
	// stop only their own accounts (see ShardCycle.Error).
	Unreachable int
	// OnTrack: every shard answered and is on track.
	OnTrack bool
	Verdict string
}

// ShardCycle is one shard's part of a ShardsStatus.
type ShardCycle struct {
	Shard  string
	Status *CycleStatus // nil when Error is set
	Error  string       // why the shard's database did not answer
}

// StatusShards returns the task's latest cycle over its shards, one
// Scheduler per shard (each with its Config.Shard, configured with its
// River client's config): the latest cycle start any of them has made,
// each shard's Status of that cycle, and the totals. A shard that does
// not answer is reported in its ShardCycle and left out of the totals:
// the others' cycles go on without it.
func StatusShards(ctx context.Context, task string, shards ...*Scheduler) (*ShardsStatus, error) {
	return statusShards(ctx, task, shards, error.Error)
}

// statusShards is StatusShards with describe saying what a shard's
// ShardCycle.Error (and the verdict) tells of its database's error: the
// error itself, or on a page open to more people than the databases are,
// only a request id.
func statusShards(ctx context.Context, task string, shards []*Scheduler, describe func(error) string) (*ShardsStatus, error) {
	if len(shards) == 0 {
		return nil, errors.New("StatusShards needs one Scheduler per shard")
	}
	out := &ShardsStatus{Task: task}
	latest := make([]error, len(shards))
	for i, s := range shards {
		st, err := s.Status(ctx, task)
		if err != nil {
			if errors.Is(err, ErrNoCycle) {
				continue
			}
			latest[i] = err
			continue
		}
		if st.Current.CycleStart.After(out.CycleStart) {
			out.CycleStart = st.Current.CycleStart
		}
	}
	if out.CycleStart.IsZero() {
		var failed []string
		for i, err := range latest {
			if err != nil {
				failed = append(failed, shards[i].shard+": "+describe(err))
			}
		}
		if len(failed) == 0 {
			return nil, &noCycleError{msg: fmt.Sprintf("task %q has no cycle on any of its %d shards", task, len(shards))}
		}
		return nil, fmt.Errorf("task %q has no cycle on the shards that answered, and %d of %d did not (%s): %w",
			task, len(failed), len(shards), strings.Join(failed, "; "), errors.Join(append(latest, ErrNoCycle)...))
	}
	out.OnTrack = true
	for i, s := range shards {
		sc := ShardCycle{Shard: s.shard}
		var c *CycleStatus
		if latest[i] == nil {
			st, err := s.StatusAt(ctx, task, out.CycleStart)
			switch {
			case err == nil:
				c = st.Current
			case errors.Is(err, ErrNoCycle):
				sc.Error = "the shard has not made the cycle"
			default:
				latest[i] = err
			}
		}
		if latest[i] != nil {
			sc.Error = describe(latest[i])
			out.Unreachable++
		}
		sc.Status = c
		out.Shards = append(out.Shards, sc)
		if c == nil {
			out.OnTrack = false
			continue
		}
		out.Slots += c.Slots - c.SlotsElsewhere
		out.SlotsDone += c.SlotsDone
		out.SlotsFailed += c.SlotsFailed
		out.BehindSlots += c.BehindSlots
		out.AccountsExpected += c.AccountsExpected
		out.Enqueued += c.Enqueued
		out.Synced += c.Synced
		out.Gone += c.Gone
		out.SkippedStale += c.SkippedStale
		out.SkippedUpstream += c.SkippedUpstream
		out.Pending += c.Pending
		out.Running += c.Running
		out.OnTrack = out.OnTrack && c.OnTrack
	}
	switch {
	case out.OnTrack:
		out.Verdict = "on track"
	default:
		var parts []string
		for _, sc := range out.Shards {
			switch {
			case sc.Error != "":
				parts = append(parts, sc.Shard+": "+sc.Error)
			case !sc.Status.OnTrack:
				parts = append(parts, sc.Shard+": "+sc.Status.Verdict)
			}
		}
		out.Verdict = fmt.Sprintf("%d of %d shards not on track (%s)", len(parts), len(shards), strings.Join(parts, "; "))
	}
	return out, nil
}
