package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/demo"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/sim"
	"github.com/riverslot/riverslot/slotplan"
)

const simulateAbout = `Simulates slot scheduling (and, with --strategy, its alternatives) without a
database: a discrete-event model of riverslot's tiers (the same validated task
spec and slot math the library runs) and of River's scheduler, producer
fetches, retries and rescuer. The defaults are the demo's, so
  riverslot simulate --accounts 20000 --cycle 120s
predicts
  riverslot demo --accounts 20000 --cycle 120s

Strategies: riverslot; naive (every account enqueued at each cycle start,
scheduled at a random time over the cycle); lrs (least recently synced first:
a poller enqueues the most overdue accounts every cycle/60).

With --upstreams N (and --upstream-rate, --upstream-burst,
--upstream-concurrency, --upstream-down KEY:FROM-TO, as demo) the accounts
are spread over N upstreams of uneven size and every sync goes through a
model of riverslot's upstream limiter and circuit breaker (the demo's:
3 failures open it, a probe every 1/32 of the cycle): it predicts each
upstream's calls, most calls in a second, deferred, probes and skipped
syncs, and how late its calls start.

With --shards N the fleet's buckets are spread over N databases s1..sN,
each with its own River (docs/shards.md), on the slots (riverslot demo
--shards' map: an even share of the cycle's slots each), and every shard is
simulated on its own: its accounts (those of the --accounts whose buckets it
owns, the same accounts as without --shards), its slots, its River and
workers. The fleet's figures are the shards' merged (syncs added, lateness
over all the syncs, the busiest second of the starts added second by
second, the largest database's queue). Uneven, slow or failing shards:
  --shard-weights 2,1,1 (or s1=2,s3=0.5)  the even map rebalanced to these
                                          weights (shards rebalance's)
  --shard-map s1:0-32767/s2:32768-65535   the map itself (shards set's
                                          --ranges), on the task's slots
  --shard-workers s2=10                   a shard's --workers
  --shard-slowdown s2=3                   its syncs and River 3x as slow,
                                          its fan-out inserts a third as fast
  --shard-down s3:30s-90s                 a shard's River down from 30s to
                                          90s after the first cycle start;
                                          when it comes back its late slots
                                          are placed or skipped as the
                                          library does (as --outage)
Each shard holds at most 100,000,000 accounts.

Output: a table, or with --json one object {"results": [...]} (with
--shards: {"map": ..., "shards": [...] each with its "results", "fleet":
[...]}); with --out DIR also metrics.csv (per interval: queue depth by
state, starts, completions, lateness, busy workers, gap between an
account's syncs), lateness.csv, simulate.sqlite (tables results, metrics,
lateness) and charts as SVG and PNG (with --shards, one directory
DIR/<shard> each).
The same flags and --seed give the same output; only wall_seconds varies.
`

type simulateOptions struct {
	cfg       sim.Config
	json      bool
	out       string
	upstreams demoUpstreamOptions
	// fleet: with --shards or --shard-map, the shards each simulated on
	// its own (nil: one database).
	fleet *sim.Fleet
}

func parseSimulateFlags(args []string, stderr io.Writer) (*simulateOptions, error) {
	fs := newFlagSet("simulate", simulateAbout, stderr)
	o := &simulateOptions{}
	c := &o.cfg
	var accounts int64
	var sf shardFlags
	fs.Int64Var(&accounts, "accounts", 10_000, "number of accounts (as demo); with --shards, the whole fleet's")
	fs.IntVar(&sf.shards, "shards", 1, "databases s1..sN the fleet's buckets are spread over on the slots, an even share each (docs/shards.md); every shard is simulated on its own")
	fs.StringVar(&sf.weights, "shard-weights", "", "W,W,... (one per shard) or NAME=W,...: the even map rebalanced so that each shard owns buckets in proportion to its weight (shards rebalance --weights; unnamed shards weigh 1)")
	fs.StringVar(&sf.ranges, "shard-map", "", "NAME:LO-HI[,LO-HI]/...: the shard map itself, on the task's slots (shards set --ranges); --shards is then its shards' count")
	fs.StringVar(&sf.workers, "shard-workers", "", "NAME=N,...: a shard's River MaxWorkers (default --workers)")
	fs.StringVar(&sf.slowdown, "shard-slowdown", "", "NAME=F,...: a shard whose syncs, fetches and River's per-job time take F times as long and whose fan-out inserts F times slower")
	fs.StringVar(&sf.down, "shard-down", "", "NAME:FROM-TO,...: a shard's River down from FROM to TO after the first cycle start, e.g. s3:30s-90s")
	durationVar(fs, &c.Cycle, "cycle", 120*time.Second, "cycle length: a whole number of seconds, a multiple of 2s, at least 16s (as demo; longer than 24h is fine here)")
	fs.IntVar(&c.Buckets, "buckets", 256, "the task's Buckets: 256 or 65536 (two UUID bytes: 24h gives 1024 slots)")
	cycles := fs.Int("cycles", 1, "number of cycles to simulate (as demo); --duration overrides it")
	fs.IntVar(&c.Workers, "workers", 50, "River MaxWorkers of the queue (as demo)")
	fs.StringVar(&c.Task, "task", "demo", "task name: the seed of the accounts' offsets (as demo)")
	fs.BoolVar(&c.Reciprocal, "reciprocal", false, "a second task, <task>_opposite, opposite the first, sharing the workers (as demo; the riverslot strategy only)")
	fs.BoolVar(&o.json, "json", false, `print one JSON object {"results": [...]} on stdout instead of the table`)
	duration := fs.Duration("duration", 0, "simulated time from the first cycle start, e.g. 168h (default: --cycles cycles)")
	syncDuration := fs.String("sync-duration", "0s", `time one sync takes: "300ms", "uniform:100ms-500ms" or "lognormal:300ms,2s" (p50,p99); the demo's sync does nothing`)
	fs.Float64Var(&c.FailRate, "fail-rate", 0, "fraction of sync attempts that fail and are retried with River's backoff, in [0, 1)")
	fs.IntVar(&c.MaxAttempts, "max-attempts", 0, "sync MaxAttempts (default riverslot's, 5)")
	fs.Float64Var(&c.Churn, "churn", 0, "fraction of accounts replaced by new ones at each cycle start, in [0, 1)")
	strategies := fs.String("strategy", "riverslot", "comma-separated strategies: riverslot, naive, lrs")
	outage := fs.String("outage", "", "START+LENGTH: every client down from START after the first cycle start, for LENGTH, e.g. 30m+1h")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the accounts' UUIDs and of every random draw")
	fs.StringVar(&o.out, "out", "", "directory for CSV, SQLite and chart files (created if missing)")
	fs.Float64Var(&c.InsertRate, "insert-rate", 32000, "sync jobs a fan-out inserts per second (docs/performance.md: fan-out throughput, make bench)")
	fs.DurationVar(&c.FetchPollInterval, "fetch-poll-interval", 250*time.Millisecond, "River FetchPollInterval (the demo's 250ms; River's default is 1s)")
	fs.DurationVar(&c.Interval, "interval", 0, "width of one metrics row (default: the simulated time / 2000, at least 1s)")
	addDemoUpstreamFlags(fs, &o.upstreams)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := o.upstreams.check(); err != nil {
		return nil, err
	}
	c.Upstreams = o.upstreams.simUpstreams()
	sharded := sf.shards != 1 || sf.ranges != ""
	switch {
	case sf.shards < 1 || sf.shards > shardsSimMax:
		return nil, usageErr("--shards must be between 1 and %d, got %d", shardsSimMax, sf.shards)
	case !sharded && (sf.weights != "" || sf.workers != "" || sf.slowdown != "" || sf.down != ""):
		return nil, usageErr("--shard-weights, --shard-workers, --shard-slowdown and --shard-down describe the shards of --shards N (N > 1) or --shard-map: give one")
	case !sharded && (accounts < 1 || accounts > sim.AccountsMax):
		return nil, usageErr("--accounts must be between 1 and 100,000,000, got %d (--shards N simulates a larger fleet, a shard of it)", accounts)
	case accounts < 1:
		return nil, usageErr("--accounts must be at least 1, got %d", accounts)
	case sharded && (c.Upstreams.Count > 0 || c.Reciprocal):
		return nil, usageErr("--shards models the plain task: leave out --upstreams and --reciprocal")
	}
	switch {
	case *cycles < 1:
		return nil, usageErr("--cycles must be at least 1, got %d", *cycles)
	case c.Workers < 1 || c.Workers > river.QueueNumWorkersMax:
		return nil, usageErr("--workers must be between 1 and %d (River's limit per queue), got %d", river.QueueNumWorkersMax, c.Workers)
	case *duration < 0:
		return nil, usageErr("--duration must be positive, e.g. 168h, got %s", *duration)
	case c.FailRate < 0 || c.FailRate >= 1:
		return nil, usageErr("--fail-rate must be in [0, 1), e.g. 0.05, got %g", c.FailRate)
	case c.Churn < 0 || c.Churn >= 1:
		return nil, usageErr("--churn must be in [0, 1), e.g. 0.01, got %g", c.Churn)
	case c.MaxAttempts < 0 || c.MaxAttempts > 100:
		return nil, usageErr("--max-attempts must be between 1 and 100 (0 for riverslot's default), got %d", c.MaxAttempts)
	case !(c.InsertRate >= 1):
		return nil, usageErr("--insert-rate must be at least 1 (jobs per second), got %g", c.InsertRate)
	case c.FetchPollInterval < time.Millisecond:
		return nil, usageErr("--fetch-poll-interval must be at least 1ms, got %s", c.FetchPollInterval)
	case c.Interval != 0 && c.Interval < time.Second:
		return nil, usageErr("--interval must be at least 1s, got %s", c.Interval)
	}
	if err := checkTaskName(c.Task); err != nil {
		return nil, err
	}
	if err := checkCycleMin("--cycle", c.Cycle); err != nil {
		return nil, err
	}
	if c.Buckets != slotplan.Buckets && c.Buckets != slotplan.BucketsTwoByte {
		return nil, usageErr("--buckets must be %d or %d (Task.Buckets), got %d", slotplan.Buckets, slotplan.BucketsTwoByte, c.Buckets)
	}
	if _, err := slotplan.NewBuckets(c.Cycle, c.Buckets); err != nil {
		return nil, usageErr("--cycle: %v", err)
	}
	c.Duration = *duration
	if c.Duration == 0 {
		c.Duration = time.Duration(*cycles) * c.Cycle
	}
	if c.Duration/c.Cycle > 10_000 {
		return nil, usageErr("--duration %s is more than 10,000 cycles of %s; shorten it or lengthen --cycle", c.Duration, c.Cycle)
	}
	if c.Interval != 0 && c.Duration/c.Interval > 1_000_000 {
		return nil, usageErr("--interval %s gives more than 1,000,000 rows over %s; use a longer --interval", c.Interval, c.Duration)
	}
	var err error
	if c.SyncDuration, err = sim.ParseDist(*syncDuration); err != nil {
		return nil, usageErr("--sync-duration: %v", err)
	}
	if c.Strategies, err = sim.ParseStrategies(*strategies); err != nil {
		return nil, usageErr("--strategy: %v", err)
	}
	if *outage != "" {
		if c.Outage, err = sim.ParseOutage(*outage); err != nil {
			return nil, usageErr("--outage: %v", err)
		}
	}
	if c.Upstreams.Count > 0 && (len(c.Strategies) != 1 || c.Strategies[0] != sim.StrategyRiverslot) {
		return nil, usageErr("--upstreams models riverslot's upstream limiter: use it with --strategy riverslot (the default)")
	}
	if c.Upstreams.Count > 0 && c.Outage != nil {
		return nil, usageErr("--upstreams and --outage together are not modelled; use --upstream-down KEY:FROM-TO for an upstream's outage")
	}
	c.Accounts = int(accounts)
	if sharded {
		plan, _ := slotplan.NewBuckets(c.Cycle, c.Buckets) // checked above
		if o.fleet, err = sf.fleet(plan, accounts, c); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseSimulateFlags(args, stderr)
	if err != nil {
		return err
	}
	if _, err := sim.Specs(o.cfg); err != nil {
		return usageErr("%v", err)
	}
	if o.out != "" {
		// Refuse an unusable --out before a long run, not after it.
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return usageErr("--out: cannot create the output directory: %v", err)
		}
	}
	o.cfg.Progress = simProgress(stderr, isTerminal(stderr))
	// The fleet is long-lived and holds no pointers: collecting when the
	// heap grows by a quarter, not by all of it, keeps 100,000,000
	// accounts within a few GB at little cost.
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	began := time.Now()
	if o.fleet != nil {
		return runSimulateShards(ctx, o, stdout, stderr, began)
	}
	results, err := sim.Run(ctx, o.cfg)
	if err != nil {
		return err
	}
	if isTerminal(stderr) {
		fmt.Fprintln(stderr)
	}
	fmt.Fprintf(stderr, "riverslot simulate: simulated %s of %d accounts in %.1fs\n", o.cfg.Duration, o.cfg.Accounts, time.Since(began).Seconds())
	if o.out != "" {
		if err := sim.WriteOutputs(ctx, o.out, results); err != nil {
			return fmt.Errorf("error writing --out %s: %w", o.out, err)
		}
		fmt.Fprintf(stderr, "riverslot simulate: wrote %s to %s\n", strings.Join(sim.Files, ", "), o.out)
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Results []*sim.Result `json:"results"`
		}{results})
	}
	printSimulation(stdout, &o.cfg, results)
	return nil
}

// runSimulateShards simulates every shard of o.fleet on its own and prints
// each and the fleet.
func runSimulateShards(ctx context.Context, o *simulateOptions, stdout, stderr io.Writer, began time.Time) error {
	run, err := sim.RunShards(ctx, o.cfg, *o.fleet)
	if err != nil {
		return err
	}
	if isTerminal(stderr) {
		fmt.Fprintln(stderr)
	}
	fmt.Fprintf(stderr, "riverslot simulate: simulated %s of %d accounts over %d shards in %.1fs\n", o.cfg.Duration, o.cfg.Accounts, len(run.Shards), time.Since(began).Seconds())
	if o.out != "" {
		for _, sh := range run.Shards {
			dir := filepath.Join(o.out, sh.Shard)
			if err := sim.WriteOutputs(ctx, dir, sh.Results); err != nil {
				return fmt.Errorf("error writing --out %s: %w", dir, err)
			}
		}
		fmt.Fprintf(stderr, "riverslot simulate: wrote %s to %s/<shard> for each shard\n", strings.Join(sim.Files, ", "), o.out)
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(run)
	}
	printShards(stdout, &o.cfg, run)
	return nil
}

// printShards prints each shard's figures and the fleet's.
func printShards(w io.Writer, c *sim.Config, run *sim.FleetRun) {
	r0 := run.Shards[0].Results[0]
	fmt.Fprintf(w, "%d accounts over %d shards, %s cycle (%d slots), %s simulated, sync %s, fail rate %g: each shard simulated on its own (its accounts, its slots, its River and workers)\n",
		c.Accounts, len(run.Shards), c.Cycle, r0.Slots, c.Duration, c.SyncDuration, c.FailRate)
	fmt.Fprintf(w, "shard map: %s\n\n", run.Map)
	for _, sh := range run.Shards {
		// A shard syncs its accounts in its slots only: as fast as a
		// database serving every slot with this many a slot.
		perCycle := int64(sh.Accounts) * int64(r0.Slots) / int64(sh.Slots)
		if need := riverslot.MaxWorkersFor(perCycle, c.Cycle); sh.Workers < need {
			fmt.Fprintf(w, "note: shard %s: %d workers start at most %d syncs a second; its %d accounts in its %d of the %d slots ask %.0f a second while it serves them: %d workers or more keep it under 70%%\n",
				sh.Shard, sh.Workers, sh.Workers*riverslot.FetchRatePerWorker, sh.Accounts, sh.Slots, r0.Slots, float64(perCycle)/c.Cycle.Seconds(), need)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shard\tbuckets\tslots\taccounts\tworkers\tslowdown\tdown\tstrategy\tsyncs done\tskipped\tpeak queue\tmean queue\tlateness p50\tp99\tmax\tmax starts/s\tworkers busy")
	for _, sh := range run.Shards {
		down := cmp.Or(sh.Down, "-")
		for _, r := range sh.Results {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%g\t%s\t%s\t%d\t%d\t%d\t%.0f\t%.3fs\t%.3fs\t%.3fs\t%d\t%.1f%%\n",
				sh.Shard, sh.Ranges, sh.Slots, sh.Accounts, sh.Workers, sh.Slowdown, down, r.Strategy, r.JobsCompleted, r.AccountsSkipped,
				r.PeakQueueDepth, r.MeanQueueDepth, r.LatenessP50Seconds, r.LatenessP99Seconds, r.LatenessMaxSeconds, r.MaxStartsPerSecond, 100*r.WorkerUtilization)
		}
	}
	_ = tw.Flush()

	fmt.Fprintf(w, "\nall %d shards (each its own database: the queue is the largest one's; lateness over every sync; starts added second by second):\n", len(run.Shards))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "strategy\tsyncs done\tskipped\tpeak queue, one database\tmean queue, all\tlateness p50\tp99\tmax\tstarts/s, mean\tbusiest second\tworkers busy\tgap p50\tgap max")
	for _, f := range run.Fleet {
		peak := strconv.FormatInt(f.MaxStartsPerSecond, 10)
		if !f.MaxStartsPerSecondExact {
			peak = "at most " + peak
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d (%s)\t%.0f\t%.3fs\t%.3fs\t%.3fs\t%.0f\t%s\t%.1f%%\t%s\t%s\n",
			f.Strategy, f.JobsCompleted, f.AccountsSkipped, f.PeakQueuePerDatabase, f.PeakQueueShard, f.MeanQueueAllDatabases,
			f.LatenessP50Seconds, f.LatenessP99Seconds, f.LatenessMaxSeconds, f.MeanStartsPerSecond, peak, 100*f.WorkerUtilization,
			secs(f.GapP50Seconds), secs(f.GapMaxSeconds))
	}
	_ = tw.Flush()
	for _, sh := range run.Shards {
		for _, r := range sh.Results {
			if r.JobsFailed > 0 || r.JobsDiscarded > 0 || r.AccountsSkipped > 0 {
				fmt.Fprintf(w, "%s %s: %d failed attempts, %d jobs discarded, %d late accounts skipped\n", sh.Shard, r.Strategy, r.JobsFailed, r.JobsDiscarded, r.AccountsSkipped)
			}
		}
	}
}

// shardsSimMax is the most shards simulate takes.
const shardsSimMax = 1024

// shardFlags are simulate's flags on shards, as given.
type shardFlags struct {
	shards                                   int
	weights, ranges, workers, slowdown, down string
}

// fleet builds the shards the flags describe over plan's slots, refusing
// (exit 2) what the simulator cannot run, naming the flag.
func (f *shardFlags) fleet(plan slotplan.Plan, accounts int64, c *sim.Config) (*sim.Fleet, error) {
	var m slotplan.ShardMap
	var names []string
	switch {
	case f.ranges != "" && f.weights != "":
		return nil, usageErr("--shard-map gives the map and --shard-weights makes one: give one or the other")
	case f.ranges != "":
		var err error
		if m, err = parseShardRanges(f.ranges); err != nil {
			return nil, usageErr("--shard-map: %v (e.g. s1:0-32767/s2:32768-65535)", err)
		}
		if err := m.Aligned(plan); err != nil {
			return nil, usageErr("--shard-map: %v", err)
		}
		names = m.Shards()
		if f.shards != 1 && f.shards != len(names) {
			return nil, usageErr("--shards %d and --shard-map's %d shards (%s) disagree: leave out --shards", f.shards, len(names), strings.Join(names, ", "))
		}
	default:
		if f.shards > plan.Slots {
			return nil, usageErr("--shards %d: a %s cycle has %d slots, and each shard serves whole slots: give at most %d shards or a cycle of more slots (a multiple of 256 s has 256, --buckets 65536 more)", f.shards, plan.Cycle, plan.Slots, plan.Slots)
		}
		// riverslot demo --shards' map: shard i gets slots [i*slots/n, (i+1)*slots/n).
		width := slotplan.BucketsTwoByte / plan.Slots
		for i := range f.shards {
			names = append(names, demo.ShardName(i))
			m.Ranges = append(m.Ranges, slotplan.ShardRange{Shard: names[i], Lo: i * plan.Slots / f.shards * width, Hi: (i+1)*plan.Slots/f.shards*width - 1})
		}
		if f.weights != "" {
			weights := map[string]float64{}
			if err := eachShardValue("--shard-weights", f.weights, names, true, func(name, v string) error {
				w, err := strconv.ParseFloat(v, 64)
				if err != nil || !(w > 0) || math.IsInf(w, 0) {
					return fmt.Errorf("weight %q must be a number above 0", v)
				}
				weights[name] = w
				return nil
			}); err != nil {
				return nil, err
			}
			for _, name := range names {
				if _, ok := weights[name]; !ok {
					weights[name] = 1
				}
			}
			next, _, err := m.Rebalance(plan, weights)
			if err != nil {
				return nil, usageErr("--shard-weights: %v", err)
			}
			m = next
		}
	}
	fleet := &sim.Fleet{Map: m}
	for _, name := range names {
		fleet.Shards = append(fleet.Shards, sim.Shard{Name: name})
		if len(m.SlotsOf(plan, 0, name)) == 0 {
			return nil, usageErr("--shard-weights: shard %s gets none of the %d slots of a %s cycle: raise its weight, give fewer shards or a cycle of more slots", name, plan.Slots, plan.Cycle)
		}
		buckets := 0
		for _, r := range m.Ranges {
			if r.Shard == name {
				buckets += r.Hi - r.Lo + 1
			}
		}
		// The shard's expected share: the exact count is known once the
		// fleet is drawn.
		if share := accounts * int64(buckets) / slotplan.BucketsTwoByte; share > sim.AccountsMax {
			return nil, usageErr("--accounts %d gives shard %s about %d accounts (%d of the 65536 buckets): one shard simulates at most 100,000,000; give more --shards or it fewer buckets", accounts, name, share, buckets)
		}
	}
	shard := func(name string) *sim.Shard { return &fleet.Shards[slices.Index(names, name)] }
	if err := eachShardValue("--shard-workers", f.workers, names, false, func(name, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > river.QueueNumWorkersMax {
			return fmt.Errorf("workers %q must be between 1 and %d (River's limit per queue)", v, river.QueueNumWorkersMax)
		}
		shard(name).Workers = n
		return nil
	}); err != nil {
		return nil, err
	}
	if err := eachShardValue("--shard-slowdown", f.slowdown, names, false, func(name, v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x > 0) || x > 1000 {
			return fmt.Errorf("slowdown %q must be a factor above 0 and at most 1000, e.g. 3 (three times as slow)", v)
		}
		shard(name).Slowdown = x
		return nil
	}); err != nil {
		return nil, err
	}
	if f.down != "" && c.Outage != nil {
		return nil, usageErr("--outage takes every shard down and --shard-down one: give one or the other")
	}
	if err := eachShardDown(f.down, names, c.Duration, func(name string, o *sim.Outage) { shard(name).Down = o }); err != nil {
		return nil, err
	}
	return fleet, nil
}

// eachShardValue calls set with each NAME=V of list (a flag's value), each
// shard at most once; positional, "V,V,..." gives every shard its value in
// order.
func eachShardValue(flag, list string, names []string, positional bool, set func(name, v string) error) error {
	if list == "" {
		return nil
	}
	parts := strings.Split(list, ",")
	if positional && !strings.Contains(list, "=") {
		if len(parts) != len(names) {
			return usageErr("%s: %d values for %d shards (%s): give one per shard, or NAME=V,...", flag, len(parts), len(names), strings.Join(names, ", "))
		}
		for i, v := range parts {
			if err := set(names[i], strings.TrimSpace(v)); err != nil {
				return usageErr("%s: shard %s: %v", flag, names[i], err)
			}
		}
		return nil
	}
	seen := map[string]bool{}
	for _, part := range parts {
		name, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return usageErr("%s: %q must be NAME=VALUE, e.g. %s=2", flag, part, names[len(names)-1])
		case !slices.Contains(names, name):
			return usageErr("%s: no shard %q: the shards are %s", flag, name, strings.Join(names, ", "))
		case seen[name]:
			return usageErr("%s: shard %s is given twice", flag, name)
		}
		seen[name] = true
		if err := set(name, v); err != nil {
			return usageErr("%s: shard %s: %v", flag, name, err)
		}
	}
	return nil
}

// eachShardDown reads --shard-down NAME:FROM-TO,...
func eachShardDown(list string, names []string, simulated time.Duration, set func(string, *sim.Outage)) error {
	if list == "" {
		return nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(list, ",") {
		name, span, ok := strings.Cut(strings.TrimSpace(part), ":")
		a, b, ok2 := strings.Cut(span, "-")
		from, errA := time.ParseDuration(a)
		to, errB := time.ParseDuration(b)
		switch {
		case !ok || !ok2 || errA != nil || errB != nil || from < 0 || to <= from:
			return usageErr("--shard-down must be NAME:FROM-TO, FROM and TO durations after the first cycle start with 0 <= FROM < TO, e.g. s3:30s-90s, got %q", part)
		case !slices.Contains(names, name):
			return usageErr("--shard-down: no shard %q: the shards are %s", name, strings.Join(names, ", "))
		case seen[name]:
			return usageErr("--shard-down: shard %s is given twice; one outage a shard", name)
		case from >= simulated:
			return usageErr("--shard-down %s: it starts at or after the end of the %s simulated; give a FROM before it, or a longer --duration", part, simulated)
		}
		seen[name] = true
		set(name, &sim.Outage{Start: from, Length: to - from})
	}
	return nil
}

// simProgress prints each strategy's progress on stderr once a run has
// taken a second: a live line on a terminal (every 200ms), else a line every
// 2s.
func simProgress(stderr io.Writer, tty bool) func(string, time.Duration, time.Duration) {
	var mu sync.Mutex
	began := time.Now()
	var last time.Time
	every := 2 * time.Second
	if tty {
		every = 200 * time.Millisecond
	}
	pct := map[string]int{}
	var order []string
	return func(s string, done, total time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := pct[s]; !ok {
			order = append(order, s)
		}
		pct[s] = int(100 * done / max(total, 1))
		now := time.Now()
		if now.Sub(began) < time.Second || now.Sub(last) < every {
			return
		}
		last = now
		// A run's last report is near 99%: many shards' finished runs
		// are counted, not listed.
		var parts []string
		finished := 0
		for _, o := range order {
			if pct[o] >= 99 && len(order) > 4 {
				finished++
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %d%%", o, pct[o]))
		}
		if finished > 0 {
			parts = append([]string{fmt.Sprintf("%d of %d done", finished, len(order))}, parts...)
		}
		line := fmt.Sprintf("riverslot simulate: %s of %s simulated (%.0fs)", strings.Join(parts, ", "), total, now.Sub(began).Seconds())
		if tty {
			fmt.Fprintf(stderr, "\r%-100s", line)
			return
		}
		fmt.Fprintln(stderr, line)
	}
}

func printSimulation(w io.Writer, c *sim.Config, results []*sim.Result) {
	r0 := results[0]
	fmt.Fprintf(w, "%d accounts, %s cycle (%d slots), %d workers, %s simulated, sync %s, fail rate %g\n\n",
		c.Accounts, c.Cycle, r0.Slots, c.Workers, c.Duration, c.SyncDuration, c.FailRate)
	tasks := int64(1)
	if c.Reciprocal {
		tasks = 2
	}
	if need := riverslot.MaxWorkersFor(tasks*int64(c.Accounts), c.Cycle); c.Workers < need {
		fmt.Fprintf(w, "note: %d workers start at most %d syncs a second (River fetches at most MaxWorkers jobs per 100 ms); the cycle asks %.0f a second: --workers %d or more keeps it under 70%%\n\n",
			c.Workers, c.Workers*riverslot.FetchRatePerWorker, float64(tasks*int64(c.Accounts))/c.Cycle.Seconds(), need)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// No wall time here (stderr has it): the table is the same for the
	// same flags.
	fmt.Fprintln(tw, "strategy\tsyncs done\tpeak queue\tmean queue\tlateness p50\tp99\tmax starts/s\tworkers busy\tgap p50\tgap max\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.3fs\t%.3fs\t%d\t%.1f%%\t%s\t%s\t\n",
			r.Strategy, r.JobsCompleted, r.PeakQueueDepth, r.MeanQueueDepth, r.LatenessP50Seconds, r.LatenessP99Seconds,
			r.MaxStartsPerSecond, 100*r.WorkerUtilization, secs(r.GapP50Seconds), secs(r.GapMaxSeconds))
	}
	_ = tw.Flush()
	for _, r := range results {
		if len(r.Upstreams) > 0 {
			fmt.Fprintln(w)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "upstream\taccounts\tlimit/s\tmost calls in 1s\tmost in flight\tcalls\tsynced\tthrottled\tdeferred\tprobes\tskipped\tlateness p99\t")
			for _, u := range r.Upstreams {
				fmt.Fprintf(tw, "%s\t%d\t%g+%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3fs\t\n", u.Key, u.Accounts, u.RateLimit, u.Burst, u.MaxPerSecond,
					u.MaxInFlight, u.Calls, u.Synced, u.Throttled, u.Deferred, u.Probes, u.Skipped, u.LatenessP99Seconds)
			}
			_ = tw.Flush()
		}
	}
	for _, r := range results {
		if r.JobsFailed > 0 || r.JobsDiscarded > 0 || r.AccountsSkipped > 0 {
			fmt.Fprintf(w, "%s: %d failed attempts, %d jobs discarded, %d late accounts skipped\n", r.Strategy, r.JobsFailed, r.JobsDiscarded, r.AccountsSkipped)
		}
	}
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}
