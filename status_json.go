package riverslot

import (
	"encoding/json"
	"time"
)

// statusJSON is the JSON form of a TaskStatus: riverslot status --json and
// the operator's page's /api/status (package riverslotweb).
type statusJSON struct {
	Task         string `json:"task"`
	CycleStart   string `json:"cycle_start"`
	Plan         string `json:"plan"`
	Placement    string `json:"placement"`
	PinsTask     string `json:"pins_task,omitempty"`
	PinsShift    int    `json:"pins_shift,omitempty"`
	PinsFallback string `json:"pins_fallback,omitempty"`
	Slots        int    `json:"slots"`
	// Shard, ShardVersion and SlotsElsewhere: a sharded task's shard, the
	// shard map version its cycle followed, the slots other shards serve.
	Shard               string `json:"shard,omitempty"`
	ShardVersion        int64  `json:"shard_version,omitempty"`
	SlotsElsewhere      int    `json:"slots_elsewhere,omitempty"`
	SlotsDone           int    `json:"slots_done"`
	SlotsFailed         int    `json:"slots_failed"`
	AccountsExpected    int64  `json:"accounts_expected"`
	SyncEnqueued        int64  `json:"sync_enqueued"`
	SyncSkipped         int64  `json:"sync_skipped"`
	SyncPending         int64  `json:"sync_pending"`
	SyncRunning         int64  `json:"sync_running"`
	SyncRetryable       int64  `json:"sync_retryable"`
	SyncCompleted       int64  `json:"sync_completed"`
	SyncFailed          int64  `json:"sync_failed"`
	SyncCancelled       int64  `json:"sync_cancelled"`
	SyncSynced          int64  `json:"sync_synced"`
	SyncGone            int64  `json:"sync_gone"`
	SyncSkippedStale    int64  `json:"sync_skipped_stale"`
	SyncSkippedUpstream int64  `json:"sync_skipped_upstream"`
	// Null when the cycle's ledger row counts no synced sync.
	LatenessP50Seconds *float64         `json:"lateness_p50_seconds"`
	LatenessP99Seconds *float64         `json:"lateness_p99_seconds"`
	LatenessSample     int64            `json:"lateness_sample"`
	NextSlot           *int             `json:"next_slot"`
	NextSlotAt         *string          `json:"next_slot_at"`
	Verdict            string           `json:"verdict"`
	AccountsError      string           `json:"accounts_error,omitempty"`
	OnTrack            bool             `json:"on_track"`
	Starting           bool             `json:"starting"`
	BehindSlots        int              `json:"behind_slots"`
	OffSlots           int              `json:"off_slots"`
	PerSlot            []statusSlotJSON `json:"per_slot"`
	Census             *censusJSON      `json:"census,omitempty"`
	Upstreams          *upstreamsJSON   `json:"upstreams,omitempty"`
	// Prepared is the cycle bootstrapped ahead of its start beside the
	// running one the rest describes (absent when there is none).
	Prepared *preparedJSON `json:"prepared,omitempty"`
}

type preparedJSON struct {
	CycleStart string `json:"cycle_start"`
	Plan       string `json:"plan"`
	Slots      int    `json:"slots"`
}

type upstreamsJSON struct {
	Keys      int            `json:"keys"`
	NotClosed int            `json:"not_closed"`
	Top       []upstreamJSON `json:"top"`
}

type upstreamJSON struct {
	Key              string  `json:"key"`
	Breaker          string  `json:"breaker"`
	OpenUntil        *string `json:"open_until"`
	PausedUntil      *string `json:"paused_until"`
	RateNow          float64 `json:"rate_now"`
	RateLimit        float64 `json:"rate_limit"`
	InFlight         int     `json:"in_flight"`
	ConcurrencyLimit int     `json:"concurrency_limit"`
	Waiting          int     `json:"waiting"`
	Calls            int64   `json:"calls"`
	Failed           int64   `json:"failed"`
	Throttled        int64   `json:"throttled"`
	Deferred         int64   `json:"deferred"`
	Skipped          int64   `json:"skipped"`
	Probes           int64   `json:"probes"`
}

type censusJSON struct {
	CycleStart   string  `json:"cycle_start"`
	Steps        int     `json:"steps"`
	NextBucket   int     `json:"next_bucket"`
	Finished     bool    `json:"finished"`
	Stalls       int     `json:"stalls"`
	StalledSince *string `json:"stalled_since"`
}

type statusSlotJSON struct {
	Slot      int    `json:"slot"`
	Start     string `json:"start"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	Expected  int64  `json:"accounts_expected"`
	PinnedIn  int64  `json:"pinned_in"`
	PinnedOut int64  `json:"pinned_out"`
	Enqueued  int64  `json:"enqueued"`
	Skipped   int64  `json:"skipped"`
	Batches   int    `json:"batches"`
	Error     string `json:"error,omitempty"`
}

// MarshalJSON encodes the current cycle as riverslot status --json prints
// it (and the operator's page's /api/status serves it), with the cycle
// prepared ahead under "prepared": snake_case fields, times in RFC 3339,
// durations in seconds.
func (st TaskStatus) MarshalJSON() ([]byte, error) {
	c := st.Current
	if c == nil {
		return json.Marshal(struct {
			Task string `json:"task"`
		}{st.Task})
	}
	out := cycleToJSON(st.Task, c)
	if p := st.Prepared; p != nil {
		out.Prepared = &preparedJSON{CycleStart: p.CycleStart.UTC().Format(time.RFC3339), Plan: p.Plan, Slots: p.Slots}
	}
	if cs := st.Census; cs != nil {
		out.Census = &censusJSON{CycleStart: cs.CycleStart.Format(time.RFC3339), Steps: cs.Steps, NextBucket: cs.NextBucket,
			Finished: cs.Finished, Stalls: cs.Stalls, StalledSince: rfc3339(&cs.StalledSince)}
	}
	if us := st.Upstreams; us != nil {
		out.Upstreams = &upstreamsJSON{Keys: us.Keys, NotClosed: us.NotClosed, Top: make([]upstreamJSON, 0, len(us.Top))}
		for _, u := range us.Top {
			out.Upstreams.Top = append(out.Upstreams.Top, upstreamJSON{Key: u.Key, Breaker: u.Breaker, OpenUntil: rfc3339(u.OpenUntil), PausedUntil: rfc3339(u.PausedUntil),
				RateNow: u.RateNow, RateLimit: u.RateLimit, InFlight: u.InFlight, ConcurrencyLimit: u.ConcurrencyLimit, Waiting: u.Waiting,
				Calls: u.Calls, Failed: u.Failed, Throttled: u.Throttled, Deferred: u.Deferred, Skipped: u.Skipped, Probes: u.Probes})
		}
	}
	return json.Marshal(out)
}

// cycleToJSON is the JSON form of one cycle's status, without the task's
// census and upstreams.
func cycleToJSON(task string, c *CycleStatus) *statusJSON {
	out := &statusJSON{
		Task: task, CycleStart: c.CycleStart.UTC().Format(time.RFC3339), Plan: c.Plan, Placement: c.Placement,
		PinsTask: c.PinsTask, PinsShift: c.PinsShift, PinsFallback: c.PinsFallback, Slots: c.Slots,
		Shard: c.Shard, ShardVersion: c.ShardVersion, SlotsElsewhere: c.SlotsElsewhere,
		SlotsDone: c.SlotsDone, SlotsFailed: c.SlotsFailed, AccountsExpected: c.AccountsExpected,
		SyncEnqueued: c.Enqueued, SyncSkipped: c.Skipped, SyncPending: c.Pending, SyncRunning: c.Running,
		SyncRetryable: c.Retryable, SyncCompleted: c.Completed, SyncFailed: c.Discarded, SyncCancelled: c.Cancelled,
		SyncSynced: c.Synced, SyncGone: c.Gone, SyncSkippedStale: c.SkippedStale, SyncSkippedUpstream: c.SkippedUpstream,
		LatenessSample: c.LatenessSample,
		Verdict:        c.Verdict, AccountsError: c.AccountsError, OnTrack: c.OnTrack, Starting: c.Starting, BehindSlots: c.BehindSlots, OffSlots: c.OffSlots,
		PerSlot: make([]statusSlotJSON, 0, len(c.PerSlot)),
	}
	if c.LatenessKnown {
		a, b := c.LatenessP50.Seconds(), c.LatenessP99.Seconds()
		out.LatenessP50Seconds, out.LatenessP99Seconds = &a, &b
	}
	if c.NextSlot >= 0 {
		next, at := c.NextSlot, c.NextSlotAt.UTC().Format(time.RFC3339)
		out.NextSlot, out.NextSlotAt = &next, &at
	}
	for _, p := range c.PerSlot {
		out.PerSlot = append(out.PerSlot, statusSlotJSON{
			Slot: p.Slot, Start: p.Start.UTC().Format(time.RFC3339), State: p.State, Attempts: p.Attempts,
			Expected: p.Expected, PinnedIn: p.PinnedIn, PinnedOut: p.PinnedOut, Enqueued: p.Enqueued, Skipped: p.Skipped, Batches: p.Batches, Error: p.Error,
		})
	}
	return out
}

// shardsJSON is the JSON form of a ShardsStatus: riverslot status --shard
// --json and the fleet's page's /api/status (riverslotweb.NewShards).
type shardsJSON struct {
	Task                string           `json:"task"`
	CycleStart          string           `json:"cycle_start"`
	Verdict             string           `json:"verdict"`
	OnTrack             bool             `json:"on_track"`
	Unreachable         int              `json:"unreachable"`
	Starting            bool             `json:"starting"`
	Conflicts           []int            `json:"conflicts"`
	Unserved            []int            `json:"unserved"`
	MapVersions         []int64          `json:"map_versions"`
	Slots               int              `json:"slots"`
	SlotsDone           int              `json:"slots_done"`
	SlotsFailed         int              `json:"slots_failed"`
	BehindSlots         int              `json:"behind_slots"`
	AccountsExpected    int64            `json:"accounts_expected"`
	SyncEnqueued        int64            `json:"sync_enqueued"`
	SyncPending         int64            `json:"sync_pending"`
	SyncRunning         int64            `json:"sync_running"`
	SyncSynced          int64            `json:"sync_synced"`
	SyncGone            int64            `json:"sync_gone"`
	SyncSkippedStale    int64            `json:"sync_skipped_stale"`
	SyncSkippedUpstream int64            `json:"sync_skipped_upstream"`
	Shards              []shardCycleJSON `json:"shards"`
}

type shardCycleJSON struct {
	Shard  string      `json:"shard"`
	Error  string      `json:"error,omitempty"`
	Status *statusJSON `json:"status"`
}

// MarshalJSON encodes the fleet's cycle as riverslot status --shard --json
// prints it: the totals, then each shard's cycle as riverslot status
// --json prints one (snake_case, times in RFC 3339, durations in seconds).
func (st ShardsStatus) MarshalJSON() ([]byte, error) {
	out := &shardsJSON{
		Task: st.Task, CycleStart: st.CycleStart.UTC().Format(time.RFC3339), Verdict: st.Verdict, OnTrack: st.OnTrack, Unreachable: st.Unreachable,
		Starting: st.Starting, Conflicts: nonNil(st.Conflicts), Unserved: nonNil(st.Unserved), MapVersions: nonNil(st.MapVersions),
		Slots: st.Slots, SlotsDone: st.SlotsDone, SlotsFailed: st.SlotsFailed, BehindSlots: st.BehindSlots, AccountsExpected: st.AccountsExpected,
		SyncEnqueued: st.Enqueued, SyncPending: st.Pending, SyncRunning: st.Running, SyncSynced: st.Synced, SyncGone: st.Gone,
		SyncSkippedStale: st.SkippedStale, SyncSkippedUpstream: st.SkippedUpstream, Shards: make([]shardCycleJSON, 0, len(st.Shards)),
	}
	for _, sc := range st.Shards {
		j := shardCycleJSON{Shard: sc.Shard, Error: sc.Error}
		if sc.Status != nil {
			j.Status = cycleToJSON(st.Task, sc.Status)
		}
		out.Shards = append(out.Shards, j)
	}
	return json.Marshal(out)
}

// MarshalJSON encodes the account's shard as the fleet's page's
// /api/accounts/{id} serves it: snake_case like the rest of the API, the
// account as AccountStatus encodes it.
func (a ShardAccount) MarshalJSON() ([]byte, error) {
	out := struct {
		Shard      string       `json:"shard"`
		MapVersion int64        `json:"map_version"`
		Account    *accountJSON `json:"account"`
	}{Shard: a.Shard, MapVersion: a.MapVersion}
	if a.Account != nil {
		out.Account = toAccountJSON(a.Account)
	}
	return json.Marshal(out)
}

// cycleJSON is the JSON form of a CycleSummary: one of the cycles of the
// operator's page's /api/cycles.
type cycleJSON struct {
	CycleStart          string  `json:"cycle_start"`
	Plan                string  `json:"plan"`
	Slots               int     `json:"slots"`
	SlotsDone           int     `json:"slots_done"`
	FailedSlots         []int   `json:"failed_slots"`
	MissingSlots        []int   `json:"missing_slots"`
	AccountsSelected    int64   `json:"accounts_selected"`
	SyncEnqueued        int64   `json:"sync_enqueued"`
	SyncSkippedLate     int64   `json:"sync_skipped_late"`
	SyncUnfinished      int64   `json:"sync_unfinished"`
	SyncFailed          int64   `json:"sync_failed"`
	SyncSkippedStale    int64   `json:"sync_skipped_stale"`
	SyncSkippedUpstream int64   `json:"sync_skipped_upstream"`
	Synced              int64   `json:"synced"`
	Uncounted           int64   `json:"uncounted"`
	NotSelected         int64   `json:"not_selected"`
	Covered             int64   `json:"covered_by_other_cycle"`
	Missed              int64   `json:"missed"`
	Coverage            float64 `json:"coverage"`
	Duplicates          int64   `json:"duplicates"`
	// Null when the cycle's ledger row counts no synced sync.
	LatenessP50Seconds *float64 `json:"lateness_p50_seconds"`
	LatenessP99Seconds *float64 `json:"lateness_p99_seconds"`
	LatenessSample     int64    `json:"lateness_sample"`
	Finished           bool     `json:"finished"`
}

// MarshalJSON encodes the cycle as the operator's page's /api/cycles lists
// it: snake_case fields, times in RFC 3339, durations in seconds, lists
// empty rather than null.
func (c CycleSummary) MarshalJSON() ([]byte, error) {
	var p50, p99 *float64
	if c.LatenessKnown {
		a, b := c.LatenessP50.Seconds(), c.LatenessP99.Seconds()
		p50, p99 = &a, &b
	}
	return json.Marshal(cycleJSON{
		CycleStart: c.CycleStart.UTC().Format(time.RFC3339), Plan: c.Plan, Slots: c.Slots, SlotsDone: c.SlotsDone,
		FailedSlots: nonNil(c.FailedSlots), MissingSlots: nonNil(c.MissingSlots),
		AccountsSelected: c.Selected, SyncEnqueued: c.Enqueued, SyncSkippedLate: c.SkippedLate,
		SyncUnfinished: c.Unfinished, SyncFailed: c.Failed, SyncSkippedStale: c.SkippedStale, SyncSkippedUpstream: c.SkippedUpstream,
		Synced: c.Synced, Uncounted: c.Uncounted, NotSelected: c.NotSelected, Covered: c.Covered, Missed: c.Missed, Coverage: c.Coverage, Duplicates: c.Duplicates,
		LatenessP50Seconds: p50, LatenessP99Seconds: p99, LatenessSample: c.LatenessSample,
		Finished: c.Finished,
	})
}

// accountJSON is the JSON form of an AccountStatus: the operator's page's
// /api/accounts/{id}.
type accountJSON struct {
	Task              string           `json:"task"`
	AccountID         string           `json:"account_id"`
	Plan              string           `json:"plan"`
	CycleStart        string           `json:"cycle_start"`
	Bucket            int              `json:"bucket"`
	Slot              int              `json:"slot"`
	OffsetSeconds     float64          `json:"offset_seconds"`
	Pinned            bool             `json:"pinned"`
	PinnedSlot        *int             `json:"pinned_slot"`
	PinWeight         *float64         `json:"pin_weight"`
	NextSyncs         []string         `json:"next_syncs"`
	CurrentCycleSync  *accountSyncJSON `json:"current_cycle_sync"`
	PreviousCycleSync *accountSyncJSON `json:"previous_cycle_sync"`
}

type accountSyncJSON struct {
	Source      string  `json:"source"`
	JobID       int64   `json:"job_id,omitempty"`
	CycleStart  string  `json:"cycle_start"`
	Plan        string  `json:"plan"`
	Slot        int     `json:"slot"`
	State       string  `json:"state"`
	ScheduledAt string  `json:"scheduled_at"`
	AttemptedAt *string `json:"attempted_at"`
	FanOutAt    *string `json:"fan_out_at"`
	Attempts    int     `json:"attempts"`
	LastError   string  `json:"last_error,omitempty"`
}

func rfc3339(t *time.Time) *string {
	if t == nil || t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// MarshalJSON encodes the account as the operator's page's
// /api/accounts/{id} serves it: snake_case fields, times in RFC 3339,
// durations in seconds, null for what is not known.
func (a AccountStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(toAccountJSON(&a))
}

func toAccountJSON(a *AccountStatus) *accountJSON {
	out := &accountJSON{
		Task: a.Task, AccountID: a.AccountID.String(), Plan: a.Plan, CycleStart: a.CycleStart.UTC().Format(time.RFC3339),
		Bucket: a.Bucket, Slot: a.Slot, OffsetSeconds: a.Offset.Seconds(), Pinned: a.Pinned, NextSyncs: []string{},
	}
	if a.Pinned {
		slot, w := a.PinnedSlot, a.PinWeight
		out.PinnedSlot, out.PinWeight = &slot, &w
	}
	for _, t := range a.NextSyncs {
		out.NextSyncs = append(out.NextSyncs, t.UTC().Format(time.RFC3339Nano))
	}
	conv := func(j *AccountSync) *accountSyncJSON {
		if j == nil {
			return nil
		}
		return &accountSyncJSON{
			Source: j.Source, JobID: j.JobID, CycleStart: j.CycleStart.UTC().Format(time.RFC3339), Plan: j.Plan, Slot: j.Slot, State: j.State,
			ScheduledAt: j.ScheduledAt.UTC().Format(time.RFC3339Nano), AttemptedAt: rfc3339(j.AttemptedAt), FanOutAt: rfc3339(j.FanOutAt),
			Attempts: j.Attempts, LastError: j.LastError,
		}
	}
	out.CurrentCycleSync, out.PreviousCycleSync = conv(a.Current), conv(a.Previous)
	return out
}

// nonNil makes a nil slice an empty one, so JSON has [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
