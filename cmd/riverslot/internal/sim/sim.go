package sim

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// Base is the simulated time of the first cycle start: a Monday, midnight
// UTC, so runs do not depend on when they are made.
var Base = time.Date(2026, time.January, 5, 0, 0, 0, 0, time.UTC)

// Result is what one strategy did over the simulated time.
type Result struct {
	Strategy         Strategy `json:"strategy"`
	Accounts         int      `json:"accounts"`
	CycleSeconds     float64  `json:"cycle_seconds"`
	Slots            int      `json:"slots"`
	Workers          int      `json:"workers"`
	SimulatedSeconds float64  `json:"simulated_seconds"`
	// WallSeconds is how long the simulation took: the one figure that
	// varies between identical runs.
	WallSeconds     float64 `json:"wall_seconds"`
	JobsCompleted   int64   `json:"jobs_completed"`
	JobsFailed      int64   `json:"jobs_failed"`    // failed attempts
	JobsDiscarded   int64   `json:"jobs_discarded"` // out of attempts
	AccountsSkipped int64   `json:"accounts_skipped"`
	// PeakQueueDepth and MeanQueueDepth count sync jobs inserted and not
	// running: scheduled, available or retryable.
	PeakQueueDepth     int64   `json:"peak_queue_depth"`
	MeanQueueDepth     float64 `json:"mean_queue_depth"`
	LatenessP50Seconds float64 `json:"lateness_p50_seconds"`
	LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
	LatenessMaxSeconds float64 `json:"lateness_max_seconds"`
	MaxStartsPerSecond int64   `json:"max_starts_per_second"`
	// MeanStartsPerSecond is over the time from the first sync start to
	// the last.
	MeanStartsPerSecond float64 `json:"mean_starts_per_second"`
	WorkerUtilization   float64 `json:"worker_utilization"`
	// Gap between an account's successive completed syncs.
	GapP50Seconds float64 `json:"sync_gap_p50_seconds"`
	GapP99Seconds float64 `json:"sync_gap_p99_seconds"`
	GapMaxSeconds float64 `json:"sync_gap_max_seconds"`

	// Upstreams are the upstreams' figures (Config.Upstreams), as the
	// demo reports them.
	Upstreams []UpstreamResult `json:"upstreams,omitempty"`

	// Rows are the per-interval metrics; Lateness the distribution of
	// start lateness (bucket upper bounds in seconds, counts).
	Rows     []Row       `json:"-"`
	Lateness []HistPoint `json:"-"`

	merge *mergeable // a shard's, for the fleet's figures (RunShards)
}

// mergeable is what a shard's run keeps for the fleet's figures: the
// distributions, the sync starts and their count in each second.
type mergeable struct {
	late, gaps   *hist
	starts       int64
	first, last  int64
	perSecond    []uint32 // sync starts in second i from the first cycle start
	perSecondAll bool     // perSecond holds every start
}

// HistPoint is one histogram bucket.
type HistPoint struct {
	UpTo  float64 // seconds
	Count uint64
}

// Run simulates each of cfg.Strategies (concurrently, one goroutine each)
// and returns their results in the order given.
func Run(ctx context.Context, cfg Config) ([]*Result, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	specs, err := Specs(cfg)
	if err != nil {
		return nil, err
	}
	fleet := newFleet(cfg.Accounts, cfg.Seed, specs[0].Plan)
	return runStrategies(ctx, &cfg, specs, fleet, nil)
}

// Specs validates the simulated riverslot tasks with taskspec.Build, as
// riverslot.New does for an app: the spec every tier runs.
func Specs(cfg Config) ([]*taskspec.Spec, error) {
	cfg.setDefaults()
	task := taskspec.Config{
		Name: cfg.Task, Cycle: cfg.Cycle, Buckets: cfg.Buckets, Table: "accounts", MaxAttempts: cfg.MaxAttempts,
		TriggerOffset: slotplan.GridOffset(Base, cfg.Cycle),
		HasSync:       true,
	}
	tasks := []taskspec.Config{task}
	if cfg.Reciprocal {
		opposite := task
		opposite.Name, opposite.OppositeOf = task.Name+"_opposite", task.Name
		tasks = append(tasks, opposite)
	}
	return taskspec.Build(tasks)
}

// newFleet is the accounts table: n random version 4 UUIDs from seed, in
// the order of the bucket index of plan (bucket, then id), so that each
// slot's accounts are one run of the slice, read in keyset order. The
// UUIDs are drawn twice from the same sequence, first to count the
// accounts of each last byte and then to place them, so the fleet takes
// one slice whatever its size (100,000,000 accounts: 1.6 GB); each run of
// one last byte is then ordered by byte 14 (with 65,536 buckets) and id.
func newFleet(n int, seed uint64, plan slotplan.Plan) []account {
	return newFleetOf(n, seed, plan, nil, nil)
}

// drawFleet calls each with the n accounts of seed's fleet, in the order
// they are drawn.
func drawFleet(n int, seed uint64, each func(a *account)) {
	rng := rand.New(rand.NewPCG(seed, 0x6163636f756e7473)) // "accounts"
	for range n {
		a := newAccount(rng)
		each(&a)
	}
}

// newFleetOf is newFleet's accounts whose two-byte bucket own holds (every
// account when own is nil): a shard's part of the fleet, in the same
// order. lastBytes, when given, counts them by their last byte already
// (countShards), which saves one drawing of the fleet.
func newFleetOf(n int, seed uint64, plan slotplan.Plan, own *bucketSet, lastBytes *[256]int) []account {
	draw := func(each func(a *account)) {
		drawFleet(n, seed, func(a *account) {
			if own == nil || own.has(a) {
				each(a)
			}
		})
	}
	var next [257]int
	if lastBytes != nil {
		copy(next[1:], lastBytes[:])
	} else {
		draw(func(a *account) { next[int(a.id[15])+1]++ })
	}
	for b := 1; b < len(next); b++ {
		next[b] += next[b-1]
	}
	starts := next
	fleet := make([]account, next[256])
	draw(func(a *account) {
		b := a.id[15]
		fleet[next[b]] = *a
		next[b]++
	})
	byID := func(x, y account) int {
		if kx, ky := binary.BigEndian.Uint64(x.id[:8]), binary.BigEndian.Uint64(y.id[:8]); kx != ky {
			return cmp.Compare(kx, ky)
		}
		return cmp.Compare(binary.BigEndian.Uint64(x.id[8:]), binary.BigEndian.Uint64(y.id[8:]))
	}
	var tmp []account
	for hi := range 256 {
		group := fleet[starts[hi]:starts[hi+1]]
		if plan.Buckets != slotplan.BucketsTwoByte {
			slices.SortFunc(group, byID)
			continue
		}
		// Counting sort of the group by byte 14, then each bucket by id.
		var at [257]int
		for _, a := range group {
			at[int(a.id[14])+1]++
		}
		for b := 1; b < len(at); b++ {
			at[b] += at[b-1]
		}
		lo := at
		tmp = slices.Grow(tmp[:0], len(group))[:len(group)]
		for _, a := range group {
			tmp[at[a.id[14]]] = a
			at[a.id[14]]++
		}
		copy(group, tmp)
		for b := range 256 {
			slices.SortFunc(group[lo[b]:lo[b+1]], byID)
		}
	}
	return fleet
}

// shardRun is what runOne needs to know of the shard it simulates (nil
// for one database serving every slot).
type shardRun struct {
	index int    // in the fleet: the stream of its random draws
	name  string // the Progress label's
	own   *bucketSet
	slots []bool // per slot of the plan: the shard serves it
}

func runOne(ctx context.Context, cfg *Config, s Strategy, specs []*taskspec.Spec, fleet []account, shard *shardRun) (*Result, error) {
	began := time.Now()
	stream := uint64(slices.Index(Strategies, s))
	label := string(s)
	if shard != nil {
		// Shard 0 draws as one database would: a fleet of one shard is the
		// run without shards.
		stream |= uint64(shard.index) << 32
		label = shard.name + " " + label
	}
	e := &engine{
		cfg: cfg, strategy: s, specs: specs, base: Base, label: label,
		rng:          rand.New(rand.NewPCG(cfg.Seed, stream)),
		accounts:     fleet, // Run's own copy for this strategy
		fanOut:       map[int32][]int32{},
		bootstrapped: map[[2]int]bool{},
		enqueued:     map[int]bool{},
		m:            newMetrics(len(fleet), len(specs), cfg.Interval, cfg.Duration),
	}
	if shard != nil {
		e.own, e.ownSlots = shard.own, shard.slots
		e.m.perSecond = true
	}
	if cfg.Upstreams.Count > 0 {
		e.up = newUpstreamModel(cfg.Upstreams, cfg.Cycle, specs[0].SyncTimeout)
	}
	switch s {
	case StrategyRiverslot:
		plan := specs[0].Plan
		// newFleet's order is the keyset order: each slot's accounts are
		// one sorted run, sized before it is filled (no growth garbage).
		sizes := make([]int, plan.Slots)
		for i := range e.accounts {
			sizes[plan.SlotOf(e.accounts[i].id)]++
		}
		e.slotOf = make([][]int32, plan.Slots)
		for slot, n := range sizes {
			e.slotOf[slot] = make([]int32, 0, n)
		}
		for i := range e.accounts {
			slot := plan.SlotOf(e.accounts[i].id)
			e.slotOf[slot] = append(e.slotOf[slot], int32(i))
		}
	case StrategyLRS:
		n := len(e.accounts)
		e.lrsK = (n*11/10 + 59) / 60
		e.lrsVer = make([]uint32, n)
		e.lastSynced = make([]int64, n)
		e.enqueuedAt = make([]int64, n)
		e.lrs = make(minHeap[lrsEntry], 0, n)
		for i := range e.accounts {
			e.lastSynced[i], e.enqueuedAt[i] = math.MinInt64, math.MinInt64
			e.lrs.push(lrsEntry{lastSynced: math.MinInt64, idKey: e.accounts[i].idKey(), acct: int32(i)})
		}
	}
	if err := e.run(ctx); err != nil {
		return nil, err
	}

	m := e.m
	r := &Result{
		Strategy: s, Accounts: cfg.Accounts, CycleSeconds: cfg.Cycle.Seconds(), Slots: specs[0].Plan.Slots,
		Workers: cfg.Workers, SimulatedSeconds: cfg.Duration.Seconds(),
		JobsCompleted: m.completed, JobsFailed: m.failed, JobsDiscarded: m.discarded, AccountsSkipped: m.skipped,
		PeakQueueDepth: m.peak, MeanQueueDepth: m.pendingArea / float64(cfg.Duration),
		LatenessP50Seconds: m.lateness.quantile(0.50), LatenessP99Seconds: m.lateness.quantile(0.99),
		LatenessMaxSeconds: float64(m.lateness.max) / 1e9,
		MaxStartsPerSecond: m.maxStarts, MeanStartsPerSecond: float64(m.starts) / max(float64(m.last-m.first)/1e9, 1),
		WorkerUtilization: m.busyArea / (float64(cfg.Workers) * float64(cfg.Duration)),
		GapP50Seconds:     m.gaps.quantile(0.50), GapP99Seconds: m.gaps.quantile(0.99),
		GapMaxSeconds: float64(m.gaps.max) / 1e9,
		Rows:          m.rows,
	}
	for i, c := range m.lateness.counts {
		if c > 0 {
			r.Lateness = append(r.Lateness, HistPoint{UpTo: histValue(i) / 1e6, Count: c})
		}
	}
	if e.up != nil {
		r.Upstreams = e.up.results(e.accounts)
	}
	if shard != nil {
		// Copies: a pointer into m would keep its per-account slices.
		late, gaps := m.lateness, m.gaps
		r.merge = &mergeable{late: &late, gaps: &gaps, starts: m.starts, first: m.first, last: m.last,
			perSecond: m.perSec, perSecondAll: !m.perSecOver}
	}
	r.WallSeconds = time.Since(began).Seconds()
	return r, nil
}

// String is a one-line summary.
func (r *Result) String() string {
	return fmt.Sprintf("%s: completed %d, peak queue %d, lateness p50 %.3fs p99 %.3fs, max starts/s %d, workers %.0f%% busy",
		r.Strategy, r.JobsCompleted, r.PeakQueueDepth, r.LatenessP50Seconds, r.LatenessP99Seconds, r.MaxStartsPerSecond, 100*r.WorkerUtilization)
}
