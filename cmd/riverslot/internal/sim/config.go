// Package sim is riverslot's discrete-event simulator: it predicts the queue
// depth, start lateness, throughput and worker use of a fleet synced by slot
// scheduling, by naive "everyone at cycle start" scheduling, or by a least
// recently synced first poller, without a database.
//
// It runs riverslot through the same code the tiers run: the task is
// validated by riverslot (taskspec.FromTask) into the spec the bootstrap,
// per-slot and sync workers use, and every sync time, slot, lead and late
// placement comes from that spec and slotplan. What it models of River is
// what shapes timing: the leader's scheduler promoting scheduled and
// retryable jobs due within the next 5 s every 5 s, each producer fetch
// (poll interval with River's jitter, insert notifications, the fetch
// cooldown, MaxWorkers, the fetch query's latency), priorities, retries with
// River's backoff and MaxAttempts, and the rescuer after an outage.
//
// A run is deterministic: the same Config gives the same Result and
// metrics, whatever the machine.
package sim

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Strategy names a way of scheduling the fleet's syncs.
type Strategy string

const (
	// StrategyRiverslot is slot scheduling through riverslot's tiers.
	StrategyRiverslot Strategy = "riverslot"
	// StrategyNaive enqueues every account at each cycle start, scheduled at
	// a seeded random time over the cycle.
	StrategyNaive Strategy = "naive"
	// StrategyLRS is least recently synced first as a River periodic poller:
	// every cycle/60 it enqueues, to run at once, the K = ceil(1.1 x
	// accounts / 60) accounts synced longest ago among those not synced in
	// the last cycle and not enqueued in the last quarter cycle (the
	// baseline riverslot bench runs against Postgres).
	StrategyLRS Strategy = "lrs"
)

// Strategies lists every strategy in output order.
var Strategies = []Strategy{StrategyNaive, StrategyLRS, StrategyRiverslot}

// ParseStrategies parses a comma-separated list such as "naive,riverslot".
func ParseStrategies(s string) ([]Strategy, error) {
	var out []Strategy
	seen := map[Strategy]bool{}
	for _, name := range strings.Split(s, ",") {
		st := Strategy(strings.TrimSpace(name))
		switch st {
		case StrategyNaive, StrategyLRS, StrategyRiverslot:
		default:
			return nil, fmt.Errorf("unknown strategy %q: use naive, lrs and/or riverslot, comma-separated", name)
		}
		if !seen[st] {
			seen[st] = true
			out = append(out, st)
		}
	}
	return out, nil
}

// Dist is a distribution of sync durations.
type Dist struct {
	// Kind is "fixed" (A), "uniform" (between A and B) or "lognormal"
	// (median A, 99th percentile B).
	Kind string
	A, B time.Duration
}

// ParseDist parses "300ms" (fixed), "uniform:100ms-500ms" or
// "lognormal:300ms,2s" (p50, p99).
func ParseDist(s string) (Dist, error) {
	const forms = `"300ms", "uniform:100ms-500ms" or "lognormal:300ms,2s" (p50,p99)`
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return Dist{}, fmt.Errorf("%q is not a duration; use %s", s, forms)
		}
		return Dist{Kind: "fixed", A: d}, nil
	}
	sep := map[string]string{"uniform": "-", "lognormal": ","}[kind]
	if sep == "" {
		return Dist{}, fmt.Errorf("unknown distribution %q; use %s", kind, forms)
	}
	as, bs, ok := strings.Cut(rest, sep)
	a, errA := time.ParseDuration(as)
	b, errB := time.ParseDuration(bs)
	if !ok || errA != nil || errB != nil || a < 0 || b < a || (kind == "lognormal" && a <= 0) {
		return Dist{}, fmt.Errorf("%q: want %s with 0 <= first <= second; use %s", s, kind+":A"+sep+"B", forms)
	}
	return Dist{Kind: kind, A: a, B: b}, nil
}

func (d Dist) String() string {
	switch d.Kind {
	case "uniform":
		return "uniform:" + d.A.String() + "-" + d.B.String()
	case "lognormal":
		return "lognormal:" + d.A.String() + "," + d.B.String()
	}
	return d.A.String()
}

// mean is the distribution's mean.
func (d Dist) mean() time.Duration {
	switch d.Kind {
	case "uniform":
		return (d.A + d.B) / 2
	case "lognormal":
		sigma := d.sigma()
		return time.Duration(float64(d.A) * math.Exp(sigma*sigma/2))
	}
	return d.A
}

// sigma of the log-normal with median A and 99th percentile B.
func (d Dist) sigma() float64 {
	if d.B <= d.A {
		return 0
	}
	const z99 = 2.3263478740408408
	return math.Log(float64(d.B)/float64(d.A)) / z99
}

// Outage takes every client down from Start (after the first cycle start)
// for Length.
type Outage struct {
	Start, Length time.Duration
}

// ParseOutage parses "START+LENGTH", e.g. "30m+1h".
func ParseOutage(s string) (*Outage, error) {
	a, b, ok := strings.Cut(s, "+")
	start, errA := time.ParseDuration(a)
	length, errB := time.ParseDuration(b)
	if !ok || errA != nil || errB != nil || start < 0 || length <= 0 {
		return nil, fmt.Errorf("%q is not START+LENGTH with START >= 0 and LENGTH > 0, e.g. 30m+1h (down 30 minutes after the first cycle start, for an hour)", s)
	}
	return &Outage{Start: start, Length: length}, nil
}

// Config describes one simulation. The zero values of the River settings
// are River's or the demo's defaults, so a Config with Accounts and Cycle
// predicts `riverslot demo` with the same flags.
type Config struct {
	Accounts int
	Cycle    time.Duration
	// Duration is the simulated time from the first cycle start. Defaults
	// to one cycle.
	Duration time.Duration
	// Task is the riverslot task's name (its offsets' seed). Defaults to
	// "demo". Reciprocal adds <Task>_opposite, opposite it.
	Task       string
	Reciprocal bool
	// Buckets is the task's Buckets: 256 (default) or 65536.
	Buckets int

	Workers           int           // River MaxWorkers of the queue; default 50
	FetchPollInterval time.Duration // default 250ms (the demo's)
	FetchCooldown     time.Duration // default 100ms (River's)
	// FetchLatency is how long a producer's fetch query takes, and
	// NotifyLatency how long an insert notification takes to reach it.
	// Defaults 3ms and 1ms: assumed, not measured; with them TestFidelity
	// matches a real demo cycle.
	FetchLatency, NotifyLatency time.Duration
	// JobOverhead is River's own time per job around the work (fetch to
	// slot free). Default 1ms.
	JobOverhead time.Duration

	SyncDuration Dist    // default fixed 0 (the demo's sync does nothing)
	FailRate     float64 // fraction of sync attempts that fail, in [0, 1)
	MaxAttempts  int     // sync MaxAttempts; default riverslot's (5)

	// InsertRate is how many sync jobs a fan-out inserts per second.
	// Default 32000, measured by `make bench` (README, fan-out throughput).
	InsertRate float64
	// Churn is the fraction of accounts replaced (removed, and as many new
	// ones added) at each cycle start, in [0, 1).
	Churn float64
	// Outage, when set, takes every client down for a while.
	Outage *Outage

	// Upstreams, when Count is set, spreads the accounts over upstreams
	// held to limits by riverslot's limiter (StrategyRiverslot only).
	Upstreams Upstreams

	// RescueStuckJobsAfter is River's rescue delay for jobs running when
	// an outage began. Default: what riverslot's Configure sets (the
	// longest timeout + 1m = 2m).
	RescueStuckJobsAfter time.Duration

	Seed       uint64
	Strategies []Strategy
	// Interval is the width of one metrics row. Default: Duration/2000,
	// rounded to a second, at least 1s.
	Interval time.Duration

	// Progress, when set, is called about once per simulated 1% with what
	// is simulated (the strategy; "s2 riverslot" for a shard of RunShards)
	// and how far it is.
	Progress func(label string, done, total time.Duration)
}

func (c *Config) setDefaults() {
	if c.Duration == 0 {
		c.Duration = c.Cycle
	}
	if c.Task == "" {
		c.Task = "demo"
	}
	if c.Workers == 0 {
		c.Workers = 50
	}
	if c.FetchPollInterval == 0 {
		c.FetchPollInterval = 250 * time.Millisecond
	}
	if c.FetchCooldown == 0 {
		c.FetchCooldown = 100 * time.Millisecond
	}
	if c.FetchLatency == 0 {
		c.FetchLatency = 3 * time.Millisecond
	}
	if c.NotifyLatency == 0 {
		c.NotifyLatency = time.Millisecond
	}
	if c.JobOverhead == 0 {
		c.JobOverhead = time.Millisecond
	}
	if c.SyncDuration.Kind == "" {
		c.SyncDuration = Dist{Kind: "fixed"}
	}
	if c.InsertRate == 0 {
		c.InsertRate = 32000
	}
	if c.RescueStuckJobsAfter == 0 {
		c.RescueStuckJobsAfter = 2 * time.Minute
	}
	if len(c.Strategies) == 0 {
		c.Strategies = []Strategy{StrategyRiverslot}
	}
	if c.Interval == 0 {
		c.Interval = max(time.Second, (c.Duration / 2000).Round(time.Second))
	}
}

// AccountsMax is the most accounts one simulated database (a run of Run,
// a shard of RunShards) holds.
const AccountsMax = 100_000_000

// validate reports every bad field, naming it and the fix.
func (c *Config) validate() error {
	var errs []error
	if c.Accounts < 1 || c.Accounts > AccountsMax {
		errs = append(errs, fmt.Errorf("Accounts must be between 1 and 100,000,000, got %d", c.Accounts))
	}
	return errors.Join(append(errs, c.validateRun())...)
}

// validateRun reports every bad field but Accounts.
func (c *Config) validateRun() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Duration < 0 {
		add("Duration must not be negative, got %s", c.Duration)
	}
	if c.Cycle > 0 && c.Duration/c.Cycle > 10_000 {
		add("Duration must be at most 10,000 cycles, got %s of %s cycles", c.Duration, c.Cycle)
	}
	if c.Workers < 1 || c.Workers > 10_000 {
		add("Workers must be between 1 and 10,000, got %d", c.Workers)
	}
	if c.FetchPollInterval < time.Millisecond || c.FetchCooldown < time.Millisecond {
		add("FetchPollInterval and FetchCooldown must be at least 1ms, got %s and %s", c.FetchPollInterval, c.FetchCooldown)
	}
	if c.FetchLatency < 0 || c.NotifyLatency < 0 || c.JobOverhead < 0 {
		add("FetchLatency, NotifyLatency and JobOverhead must not be negative")
	}
	if c.FailRate < 0 || c.FailRate >= 1 || math.IsNaN(c.FailRate) {
		add("FailRate must be in [0, 1), got %g", c.FailRate)
	}
	if c.Churn < 0 || c.Churn >= 1 || math.IsNaN(c.Churn) {
		add("Churn must be in [0, 1), got %g", c.Churn)
	}
	if c.MaxAttempts < 0 || c.MaxAttempts > 100 {
		add("MaxAttempts must be between 1 and 100 (0 for the default), got %d", c.MaxAttempts)
	}
	if !(c.InsertRate >= 1) {
		add("InsertRate must be at least 1 job/s, got %g", c.InsertRate)
	}
	if c.Outage != nil && (c.Outage.Start < 0 || c.Outage.Length <= 0) {
		add("Outage must start at or after 0 and last more than 0, got %s+%s", c.Outage.Start, c.Outage.Length)
	}
	if u := c.Upstreams; u.Count != 0 {
		if u.Count < 0 || u.Count > 1000 {
			add("Upstreams.Count must be 0 (none) to 1000, got %d", u.Count)
		}
		if !(u.Rate >= 0) || math.IsInf(u.Rate, 0) || u.Burst < 0 || u.Concurrency < 0 {
			add("Upstreams.Rate, Burst and Concurrency must be finite and not negative, got %g, %d and %d", u.Rate, u.Burst, u.Concurrency)
		}
		if d := u.Down; d != nil && (d.Bank < 0 || d.Bank >= u.Count || !(d.From >= 0 && d.From < d.To && d.To <= 1)) {
			add("Upstreams.Down must name one of the %d upstreams and a part FROM-TO of the cycle with 0 <= FROM < TO <= 1, got bank %d, %g-%g", u.Count, d.Bank, d.From, d.To)
		}
		for _, st := range c.Strategies {
			if st != StrategyRiverslot {
				add("Upstreams model riverslot's limiter: use Strategies riverslot only, got %s", st)
			}
		}
		if c.Outage != nil {
			add("Upstreams and Outage together are not modelled (leases of calls cut by the outage would never expire): use one or the other")
		}
	} else if c.Upstreams != (Upstreams{}) {
		add("Upstreams.Rate, Burst, Concurrency and Down need Upstreams.Count")
	}
	if c.Interval < time.Second {
		add("Interval must be at least 1s, got %s", c.Interval)
	}
	if c.Duration > 0 && c.Duration/c.Interval > 1_000_000 {
		add("Interval %s gives more than 1,000,000 metrics rows over %s; use a longer Interval", c.Interval, c.Duration)
	}
	return errors.Join(errs...)
}
