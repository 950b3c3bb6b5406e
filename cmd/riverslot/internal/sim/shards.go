package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// Shard is one shard of a simulated fleet: a database with its own River,
// serving the slots its buckets give it.
type Shard struct {
	// Name is the shard's name in Fleet.Map.
	Name string
	// Workers is its River MaxWorkers. Defaults to Config.Workers.
	Workers int
	// Slowdown multiplies every time the shard takes (its syncs, its
	// fetch queries, insert notifications and River's per-job overhead)
	// and divides its fan-out's insert rate: 3 is a shard three times as
	// slow, its database or its nodes loaded. Defaults to 1.
	Slowdown float64
	// Down, when set, takes the shard's River clients down for a while, as
	// Config.Outage takes every client of one database down: when it
	// comes back, its rescuer, its late per-slot jobs and its stale syncs
	// follow the library's rules.
	Down *Outage
}

// Fleet is a sharded fleet (docs/shards.md): Config.Accounts (the whole
// fleet's, the accounts Run would simulate with the same Seed) spread over
// the shards of Map by their two-byte buckets.
type Fleet struct {
	// Map gives each shard its buckets; its ranges must fall on the
	// task's slots.
	Map slotplan.ShardMap
	// Shards lists every shard of Map once, in the order of the results.
	Shards []Shard
}

// ShardResult is one shard's run.
type ShardResult struct {
	Shard    string  `json:"shard"`
	Ranges   string  `json:"ranges"`  // its buckets: "0-24575,40960-49151"
	Buckets  int     `json:"buckets"` // of the 65,536
	Slots    int     `json:"slots"`   // of each cycle's, that it serves
	Accounts int     `json:"accounts"`
	Workers  int     `json:"workers"`
	Slowdown float64 `json:"slowdown"`
	// Down is its outage, FROM-TO after the first cycle start.
	Down string `json:"down,omitempty"`
	// Results are its figures, one per strategy.
	Results []*Result `json:"results"`
}

// FleetResult is one strategy's figures over every shard of a fleet,
// merged from the shards' own runs.
type FleetResult struct {
	Strategy        Strategy `json:"strategy"`
	Shards          int      `json:"shards"`
	Accounts        int64    `json:"accounts"`
	JobsCompleted   int64    `json:"jobs_completed"`
	JobsFailed      int64    `json:"jobs_failed"`
	JobsDiscarded   int64    `json:"jobs_discarded"`
	AccountsSkipped int64    `json:"accounts_skipped"`
	// PeakQueuePerDatabase is the largest of the shards' peaks, that of
	// PeakQueueShard: no queue spans two databases.
	PeakQueuePerDatabase int64  `json:"peak_queue_depth_per_database"`
	PeakQueueShard       string `json:"peak_queue_shard"`
	// MeanQueueAllDatabases is the shards' mean queues added up.
	MeanQueueAllDatabases float64 `json:"mean_queue_depth_all_databases"`
	// Lateness and gaps are of every shard's syncs together.
	LatenessP50Seconds float64 `json:"lateness_p50_seconds"`
	LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
	LatenessMaxSeconds float64 `json:"lateness_max_seconds"`
	// MeanStartsPerSecond is over the time from the fleet's first sync
	// start to its last.
	MeanStartsPerSecond float64 `json:"mean_starts_per_second"`
	// MaxStartsPerSecond is the fleet's busiest second, the shards' starts
	// added second by second, when MaxStartsPerSecondExact; else (a run
	// of more than 10,000,000 s) the shards' peaks added up, an upper
	// bound.
	MaxStartsPerSecond      int64 `json:"max_starts_per_second"`
	MaxStartsPerSecondExact bool  `json:"max_starts_per_second_exact"`
	// WorkerUtilization is the busy share of all the shards' workers.
	WorkerUtilization float64 `json:"worker_utilization"`
	GapP50Seconds     float64 `json:"sync_gap_p50_seconds"`
	GapP99Seconds     float64 `json:"sync_gap_p99_seconds"`
	GapMaxSeconds     float64 `json:"sync_gap_max_seconds"`
}

// FleetRun is what RunShards returns: each shard's run, and the fleet's
// figures per strategy.
type FleetRun struct {
	Map    slotplan.ShardMap `json:"map"`
	Shards []ShardResult     `json:"shards"`
	Fleet  []FleetResult     `json:"fleet"`
}

// bucketSet is a set of the 65,536 two-byte buckets.
type bucketSet [slotplan.BucketsTwoByte / 64]uint64

func (s *bucketSet) add(b int) { s[b/64] |= 1 << (b % 64) }

// has says whether the set holds a's two-byte bucket.
func (s *bucketSet) has(a *account) bool {
	b := slotplan.BucketOf(a.id, slotplan.BucketsTwoByte)
	return s[b/64]&(1<<(b%64)) != 0
}

// scaled is the distribution with every duration f times as long.
func (d Dist) scaled(f float64) Dist {
	d.A, d.B = scale(d.A, f), scale(d.B, f)
	return d
}

func scale(d time.Duration, f float64) time.Duration {
	return time.Duration(math.Round(float64(d) * f))
}

// RunShards simulates every shard of fleet on its own, as each is a
// database with its own River: its own accounts (those of cfg's fleet
// whose buckets it owns), its own slots, workers, speed and outage. The
// fleet's figures are the shards' merged: counts and mean queues added,
// lateness and gaps over all the syncs, the busiest second of the starts
// added second by second. Shards run side by side while the fleet holds
// at most AccountsMax accounts, else one after the other.
//
// Upstreams and Reciprocal are not modelled over shards.
func RunShards(ctx context.Context, cfg Config, fleet Fleet) (*FleetRun, error) {
	cfg.setDefaults()
	plan, err := checkFleet(&cfg, &fleet)
	if err != nil {
		return nil, err
	}
	specs, err := Specs(cfg)
	if err != nil {
		return nil, err
	}
	n := len(fleet.Shards)
	index := map[string]int{}
	for i, sh := range fleet.Shards {
		index[sh.Name] = i
	}
	owner := make([]uint16, slotplan.BucketsTwoByte)
	own := make([]bucketSet, n)
	out := &FleetRun{Map: fleet.Map, Shards: make([]ShardResult, n)}
	for i, sh := range fleet.Shards {
		out.Shards[i] = ShardResult{Shard: sh.Name, Workers: cmp0(sh.Workers, cfg.Workers), Slowdown: cmp0(sh.Slowdown, 1)}
		if sh.Down != nil {
			out.Shards[i].Down = sh.Down.Start.String() + "-" + (sh.Down.Start + sh.Down.Length).String()
		}
	}
	ranges := make([][]string, n)
	for _, r := range fleet.Map.Ranges {
		i := index[r.Shard]
		for b := r.Lo; b <= r.Hi; b++ {
			owner[b] = uint16(i)
			own[i].add(b)
		}
		ranges[i] = append(ranges[i], fmt.Sprintf("%d-%d", r.Lo, r.Hi))
		out.Shards[i].Buckets += r.Hi - r.Lo + 1
	}
	slots := make([][]bool, n)
	for i, sh := range fleet.Shards {
		out.Shards[i].Ranges = strings.Join(ranges[i], ",")
		slots[i] = make([]bool, plan.Slots)
		for _, s := range fleet.Map.SlotsOf(plan, specs[0].Shift, sh.Name) {
			slots[i][s] = true
			out.Shards[i].Slots++
		}
	}

	// One drawing of the fleet counts each shard's accounts by last byte;
	// each shard draws it again for its own.
	lastBytes := make([][256]int, n)
	drawFleet(cfg.Accounts, cfg.Seed, func(a *account) { lastBytes[owner[slotplan.BucketOf(a.id, slotplan.BucketsTwoByte)]][a.id[15]]++ })
	for i := range out.Shards {
		for _, c := range lastBytes[i] {
			out.Shards[i].Accounts += c
		}
		if c := out.Shards[i].Accounts; c > AccountsMax {
			return nil, fmt.Errorf("shard %s holds %d of the %d accounts: one shard simulates at most 100,000,000; spread them over more shards", out.Shards[i].Shard, c, cfg.Accounts)
		}
	}

	par := 1
	if cfg.Accounts <= AccountsMax {
		par = max(1, min(n, runtime.GOMAXPROCS(0)/len(cfg.Strategies)))
	}
	sem := make(chan struct{}, par)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, sh := range fleet.Shards {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			c := cfg
			c.Accounts = out.Shards[i].Accounts
			c.Workers = out.Shards[i].Workers
			if f := out.Shards[i].Slowdown; f != 1 {
				c.SyncDuration = c.SyncDuration.scaled(f)
				c.FetchLatency, c.NotifyLatency, c.JobOverhead = scale(c.FetchLatency, f), scale(c.NotifyLatency, f), scale(c.JobOverhead, f)
				c.InsertRate /= f
			}
			if sh.Down != nil {
				c.Outage = sh.Down
			}
			accounts := newFleetOf(cfg.Accounts, cfg.Seed, plan, &own[i], &lastBytes[i])
			run := &shardRun{index: i, name: sh.Name, own: &own[i], slots: slots[i]}
			out.Shards[i].Results, errs[i] = runStrategies(ctx, &c, specs, accounts, run)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for k, s := range cfg.Strategies {
		out.Fleet = append(out.Fleet, mergeFleet(s, k, out.Shards))
	}
	return out, nil
}

func cmp0[T int | float64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// checkFleet validates cfg for a fleet and the fleet, naming the field
// and the fix, and returns the task's plan.
func checkFleet(cfg *Config, fleet *Fleet) (slotplan.Plan, error) {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := cfg.validateRun(); err != nil {
		errs = append(errs, err)
	}
	if cfg.Accounts < 1 {
		add("Accounts must be at least 1, got %d", cfg.Accounts)
	}
	if cfg.Upstreams != (Upstreams{}) || cfg.Reciprocal {
		add("Upstreams and Reciprocal are not modelled over shards: leave them out of a fleet's Config")
	}
	specs, err := Specs(*cfg)
	if err != nil {
		return slotplan.Plan{}, errors.Join(append(errs, err)...)
	}
	plan := specs[0].Plan
	fleet.Map.Ranges = slices.Clone(fleet.Map.Ranges)
	if err := fleet.Map.Validate(); err != nil {
		add("Map: %w", err)
	} else if err := fleet.Map.Aligned(plan); err != nil {
		add("Map: %w", err)
	}
	names := fleet.Map.Shards()
	seen := map[string]bool{}
	for _, sh := range fleet.Shards {
		switch {
		case !slices.Contains(names, sh.Name):
			add("Shards: %q is not a shard of the map (%s)", sh.Name, strings.Join(names, ", "))
		case seen[sh.Name]:
			add("Shards: %q is listed twice", sh.Name)
		}
		seen[sh.Name] = true
		if sh.Workers < 0 || sh.Workers > 10_000 {
			add("Shards: %s's Workers must be between 1 and 10,000 (0 for Config.Workers), got %d", sh.Name, sh.Workers)
		}
		if sh.Slowdown < 0 || math.IsNaN(sh.Slowdown) || math.IsInf(sh.Slowdown, 0) || sh.Slowdown > 1000 {
			add("Shards: %s's Slowdown must be above 0 and at most 1000 (0 for 1), got %g", sh.Name, sh.Slowdown)
		}
		if d := sh.Down; d != nil {
			if d.Start < 0 || d.Length <= 0 || d.Start >= cfg.Duration {
				add("Shards: %s's Down must start at or after 0 and before the end of the simulated %s, and last more than 0, got %s+%s", sh.Name, cfg.Duration, d.Start, d.Length)
			}
			if cfg.Outage != nil {
				add("Shards: %s's Down and Outage (every shard down) together are not modelled: give one or the other", sh.Name)
			}
		}
	}
	for _, name := range names {
		if !seen[name] {
			add("Shards: the map's shard %q is not listed; list every shard once", name)
		}
	}
	if len(fleet.Shards) > 1<<16-1 {
		add("Shards: at most 65,535, got %d", len(fleet.Shards))
	}
	return plan, errors.Join(errs...)
}

// runStrategies runs each of cfg.Strategies over fleet, side by side, and
// returns their results in order.
func runStrategies(ctx context.Context, cfg *Config, specs []*taskspec.Spec, fleet []account, shard *shardRun) ([]*Result, error) {
	results := make([]*Result, len(cfg.Strategies))
	errs := make([]error, len(cfg.Strategies))
	var wg sync.WaitGroup
	for i, s := range cfg.Strategies {
		wg.Go(func() {
			f := fleet
			if len(cfg.Strategies) > 1 {
				f = slices.Clone(fleet) // churn replaces accounts
			}
			results[i], errs[i] = runOne(ctx, cfg, s, specs, f, shard)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return results, nil
}

// mergeFleet is strategy k's figures over every shard.
func mergeFleet(s Strategy, k int, shards []ShardResult) FleetResult {
	f := FleetResult{Strategy: s, Shards: len(shards), MaxStartsPerSecondExact: true}
	var late, gaps hist
	var starts, peaks int64
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	var busy, workers float64
	var perSecond []uint64
	for _, sh := range shards {
		r := sh.Results[k]
		f.Accounts += int64(r.Accounts)
		f.JobsCompleted += r.JobsCompleted
		f.JobsFailed += r.JobsFailed
		f.JobsDiscarded += r.JobsDiscarded
		f.AccountsSkipped += r.AccountsSkipped
		if f.PeakQueueShard == "" || r.PeakQueueDepth > f.PeakQueuePerDatabase {
			f.PeakQueuePerDatabase, f.PeakQueueShard = r.PeakQueueDepth, sh.Shard
		}
		f.MeanQueueAllDatabases += r.MeanQueueDepth
		busy += r.WorkerUtilization * float64(r.Workers)
		workers += float64(r.Workers)
		peaks += r.MaxStartsPerSecond
		m := r.merge
		late.merge(m.late)
		gaps.merge(m.gaps)
		if m.starts > 0 {
			starts += m.starts
			first, last = min(first, m.first), max(last, m.last)
		}
		f.MaxStartsPerSecondExact = f.MaxStartsPerSecondExact && m.perSecondAll
		for len(perSecond) < len(m.perSecond) {
			perSecond = append(perSecond, 0)
		}
		for i, c := range m.perSecond {
			perSecond[i] += uint64(c)
		}
	}
	f.LatenessP50Seconds, f.LatenessP99Seconds = late.quantile(0.50), late.quantile(0.99)
	f.LatenessMaxSeconds = float64(late.max) / 1e9
	f.GapP50Seconds, f.GapP99Seconds = gaps.quantile(0.50), gaps.quantile(0.99)
	f.GapMaxSeconds = float64(gaps.max) / 1e9
	if starts > 0 {
		f.MeanStartsPerSecond = float64(starts) / max(float64(last-first)/1e9, 1)
	}
	if workers > 0 {
		f.WorkerUtilization = busy / workers
	}
	if f.MaxStartsPerSecondExact {
		for _, c := range perSecond {
			f.MaxStartsPerSecond = max(f.MaxStartsPerSecond, int64(c))
		}
	} else {
		f.MaxStartsPerSecond = peaks
	}
	return f
}
