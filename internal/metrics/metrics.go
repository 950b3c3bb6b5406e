// Package metrics holds riverslot's OpenTelemetry instruments. the riverslot package
// builds one Instruments from Config.MeterProvider and hands it to the tiers
// through their task specs; a nil provider gives no-op instruments.
package metrics

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// ScopeName is the instrumentation scope of riverslot's meter.
const ScopeName = "github.com/riverslot/riverslot"

// Instrument names, as exported (Prometheus turns dots into underscores and
// adds the unit and _total suffixes).
const (
	FanOutDuration = "riverslot.fanout.duration"
	FanOutAccounts = "riverslot.fanout.accounts"
	SyncEnqueued   = "riverslot.sync.enqueued"
	LateSpread     = "riverslot.late.spread"
	LateSkipped    = "riverslot.late.skipped"
	SyncLateness   = "riverslot.sync.lateness"
	SlotLag        = "riverslot.slot.lag"
	SlotRetries    = "riverslot.slot.retries"
	SyncSkipped    = "riverslot.sync.skipped"
	UpstreamWaits  = "riverslot.upstream.waits"
	UpstreamCalls  = "riverslot.upstream.calls"
)

// Instruments are riverslot's metrics. The zero value is not usable; a nil
// *Instruments records nothing.
type Instruments struct {
	// shard labels every measurement "shard" when set (SetShard): a
	// sharded task's databases each report their own.
	shard          string
	fanOutDuration metric.Float64Histogram
	fanOutAccounts metric.Int64Histogram
	syncEnqueued   metric.Int64Counter
	lateSpread     metric.Int64Counter
	lateSkipped    metric.Int64Counter
	syncLateness   metric.Float64Histogram
	slotLag        metric.Float64Histogram
	slotRetries    metric.Int64Counter
	syncSkipped    metric.Int64Counter
	upstreamWaits  metric.Int64Counter
	upstreamCalls  metric.Int64Counter
}

// latenessBuckets suit start lateness: River polls every second by default
// and promotes scheduled jobs every 5 s; minutes mean a backlog.
var latenessBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// New creates the instruments on provider's meter; a nil provider gives
// no-op instruments.
func New(provider metric.MeterProvider) (*Instruments, error) {
	if provider == nil {
		provider = noop.NewMeterProvider()
	}
	m := provider.Meter(ScopeName)
	in := &Instruments{}
	var errs [11]error
	in.fanOutDuration, errs[0] = m.Float64Histogram(FanOutDuration, metric.WithUnit("s"),
		metric.WithDescription("Time one per-slot fan-out attempt took to enqueue its slot's sync jobs."),
		metric.WithExplicitBucketBoundaries(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
	in.fanOutAccounts, errs[1] = m.Int64Histogram(FanOutAccounts, metric.WithUnit("{account}"),
		metric.WithDescription("Accounts one finished slot fan-out handled (enqueued or skipped as late): the per-slot load and its skew."),
		metric.WithExplicitBucketBoundaries(10, 100, 1000, 5000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000))
	in.syncEnqueued, errs[2] = m.Int64Counter(SyncEnqueued, metric.WithUnit("{job}"),
		metric.WithDescription("Sync jobs inserted by per-slot fan-outs, counted when their transaction commits; its rate is the enqueue throughput."))
	in.lateSpread, errs[3] = m.Int64Counter(LateSpread, metric.WithUnit("{account}"),
		metric.WithDescription("Accounts enqueued past their time plus LateGrace and spread over a catch-up window (LatePolicySpread)."))
	in.lateSkipped, errs[4] = m.Int64Counter(LateSkipped, metric.WithUnit("{account}"),
		metric.WithDescription("Late accounts a fan-out skipped (LatePolicySkip, or too late to spread): the next cycle syncs them."))
	in.syncLateness, errs[5] = m.Float64Histogram(SyncLateness, metric.WithUnit("s"),
		metric.WithDescription("How long after its scheduled time a sync job's first attempt started."),
		metric.WithExplicitBucketBoundaries(latenessBuckets...))
	in.slotLag, errs[6] = m.Float64Histogram(SlotLag, metric.WithUnit("s"),
		metric.WithDescription("How long after its scheduled time (Lead before its slot) a per-slot job's first attempt started: the cycle's lag."),
		metric.WithExplicitBucketBoundaries(latenessBuckets...))
	in.slotRetries, errs[7] = m.Int64Counter(SlotRetries, metric.WithUnit("{attempt}"),
		metric.WithDescription("Per-slot fan-out attempts after the first (a failed, timed-out or rescued fan-out resuming from its cursor)."))
	in.syncSkipped, errs[8] = m.Int64Counter(SyncSkipped, metric.WithUnit("{job}"),
		metric.WithDescription("Sync jobs completed without calling Sync, by reason: stale (started past half a cycle before the account's next regular sync), upstream_down (its upstream's breaker held it past its NotAfter) or upstream_throttled (its upstream's limits had no room for it before its NotAfter)."))
	// By task and cause or outcome only: an upstream's key is not a
	// label (thousands of banks would be thousands of series);
	// Scheduler.Upstreams and riverslot upstream list show each one.
	in.upstreamWaits, errs[9] = m.Int64Counter(UpstreamWaits, metric.WithUnit("{wait}"),
		metric.WithDescription("Waits of sync jobs for their upstream's limits (snoozed, or held in process for a lease), by cause: rate, concurrency, paused (the upstream asked for it), open (its breaker is open), probe (its breaker's probe runs)."))
	in.upstreamCalls, errs[10] = m.Int64Counter(UpstreamCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Sync calls through an upstream's limits, by outcome: succeeded, failed, throttled."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return in, nil
}

// SetShard labels every measurement with the shard (riverslot.Config.Shard)
// the node serves, "" for none.
func (in *Instruments) SetShard(shard string) {
	if in != nil {
		in.shard = shard
	}
}

// attrs is the measurement's attributes: the task, kv, and the shard when
// one is set.
func (in *Instruments) attrs(task string, kv ...attribute.KeyValue) metric.MeasurementOption {
	all := append([]attribute.KeyValue{attribute.String("task", task)}, kv...)
	if in.shard != "" {
		all = append(all, attribute.String("shard", in.shard))
	}
	return metric.WithAttributeSet(attribute.NewSet(all...))
}

// BatchCommitted records one committed fan-out batch.
func (in *Instruments) BatchCommitted(ctx context.Context, task string, inserted, spread, skipped int64) {
	if in == nil {
		return
	}
	attrs := in.attrs(task)
	if inserted > 0 {
		in.syncEnqueued.Add(ctx, inserted, attrs)
	}
	if spread > 0 {
		in.lateSpread.Add(ctx, spread, attrs)
	}
	if skipped > 0 {
		in.lateSkipped.Add(ctx, skipped, attrs)
	}
}

// FanOutDone records a fan-out attempt that finished its slot.
func (in *Instruments) FanOutDone(ctx context.Context, task string, took time.Duration, accounts int64) {
	if in == nil {
		return
	}
	attrs := in.attrs(task)
	in.fanOutDuration.Record(ctx, took.Seconds(), attrs)
	in.fanOutAccounts.Record(ctx, accounts, attrs)
}

// SlotStarted records a per-slot job's attempt starting: its lag on the
// first attempt, a retry on later ones.
func (in *Instruments) SlotStarted(ctx context.Context, task string, slot, attempt int, scheduledAt, now time.Time) {
	if in == nil {
		return
	}
	if attempt <= 1 {
		in.slotLag.Record(ctx, max(now.Sub(scheduledAt), 0).Seconds(), in.attrs(task))
		return
	}
	in.slotRetries.Add(ctx, 1, in.attrs(task, attribute.Int("slot", slot)))
}

// SyncStarted records a sync job's start lateness.
func (in *Instruments) SyncStarted(ctx context.Context, task string, scheduledAt, now time.Time) {
	if in == nil {
		return
	}
	in.syncLateness.Record(ctx, max(now.Sub(scheduledAt), 0).Seconds(), in.attrs(task))
}

// SyncSkipped records a sync job completed without calling Sync, for
// reason ("stale", "upstream_down" or "upstream_throttled").
func (in *Instruments) SyncSkipped(ctx context.Context, task, reason string) {
	if in == nil {
		return
	}
	in.syncSkipped.Add(ctx, 1, in.attrs(task, attribute.String("reason", reason)))
}

// UpstreamWait records a sync job snoozed by its upstream's limits, for
// cause (rate, concurrency, paused, open, probe).
func (in *Instruments) UpstreamWait(ctx context.Context, task, cause string) {
	if in == nil {
		return
	}
	in.upstreamWaits.Add(ctx, 1, in.attrs(task, attribute.String("cause", cause)))
}

// UpstreamCall records a sync's call through its upstream's limits, by
// outcome (succeeded, failed, throttled).
func (in *Instruments) UpstreamCall(ctx context.Context, task, outcome string) {
	if in == nil {
		return
	}
	in.upstreamCalls.Add(ctx, 1, in.attrs(task, attribute.String("outcome", outcome)))
}
