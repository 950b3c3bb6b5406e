package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
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

With --shards N the fleet's buckets are spread evenly over N databases,
each with its own River (docs/shards.md): one shard (--accounts / N
accounts, --workers workers) is simulated and the fleet reported as N
alike; --accounts may then reach 100,000,000 a shard.

Output: a table, or with --json one object {"results": [...]} (and with
--shards "fleet": [...]); with --out DIR
also metrics.csv (per interval: queue depth by state, starts, completions,
lateness, busy workers, gap between an account's syncs), lateness.csv,
simulate.sqlite (tables results, metrics, lateness) and charts as SVG and PNG.
The same flags and --seed give the same output; only wall_seconds varies.
`

type simulateOptions struct {
	cfg       sim.Config
	json      bool
	out       string
	upstreams demoUpstreamOptions
	// shards and total: with --shards, the fleet's shards and its accounts
	// (cfg.Accounts is then one shard's).
	shards int
	total  int64
}

func parseSimulateFlags(args []string, stderr io.Writer) (*simulateOptions, error) {
	fs := newFlagSet("simulate", simulateAbout, stderr)
	o := &simulateOptions{}
	c := &o.cfg
	var accounts int64
	fs.Int64Var(&accounts, "accounts", 10_000, "number of accounts (as demo); with --shards, the whole fleet's")
	fs.IntVar(&o.shards, "shards", 1, "databases the fleet's buckets are spread over, evenly (docs/shards.md): one shard is simulated (its accounts, River and --workers), and the fleet reported as that many alike")
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
	if o.shards < 1 || o.shards > 1024 {
		return nil, usageErr("--shards must be between 1 and 1024, got %d", o.shards)
	}
	o.total = accounts
	perShard := (accounts + int64(o.shards) - 1) / int64(o.shards)
	switch {
	case (accounts < 1 || perShard > 100_000_000) && o.shards == 1:
		return nil, usageErr("--accounts must be between 1 and 100,000,000, got %d (--shards N simulates a larger fleet, a shard of it)", accounts)
	case accounts < 1 || perShard > 100_000_000:
		return nil, usageErr("--accounts %d over %d shards is %d a shard: one shard simulates 1 to 100,000,000; give more --shards", accounts, o.shards, perShard)
	case o.shards > 1 && (c.Upstreams.Count > 0 || c.Reciprocal):
		return nil, usageErr("--shards models the plain task: leave out --upstreams and --reciprocal")
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
	c.Accounts = int(perShard)
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
	fleet := sim.AllShards(results, o.shards)
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Results []*sim.Result      `json:"results"`
			Fleet   []sim.ShardsResult `json:"fleet,omitempty"`
		}{results, fleet})
	}
	if o.shards > 1 {
		fmt.Fprintf(stdout, "%d shards of %d accounts (%d in all); one shard simulated: its own database, River and %d workers\n\n", o.shards, o.cfg.Accounts, o.total, o.cfg.Workers)
	}
	printSimulation(stdout, &o.cfg, results)
	if len(fleet) > 0 {
		fmt.Fprintf(stdout, "\nall %d shards (no query and no lock spans two: each shard as the one above):\n", o.shards)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "strategy\tsyncs done\tqueue per database, peak\tmean, all databases\tstarts/s, mean\tat most\tlateness p99\t")
		for _, f := range fleet {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%d\t%.3fs\t\n", f.Strategy, f.JobsCompleted, f.PeakQueuePerDatabase, f.MeanQueueAllDatabases,
				f.MeanStartsPerSecond, f.MaxStartsPerSecond, f.LatenessP99Seconds)
		}
		_ = tw.Flush()
	}
	return nil
}

// simProgress prints each strategy's progress on stderr once a run has
// taken a second: a live line on a terminal (every 200ms), else a line every
// 2s.
func simProgress(stderr io.Writer, tty bool) func(sim.Strategy, time.Duration, time.Duration) {
	var mu sync.Mutex
	began := time.Now()
	var last time.Time
	every := 2 * time.Second
	if tty {
		every = 200 * time.Millisecond
	}
	pct := map[sim.Strategy]int{}
	var order []sim.Strategy
	return func(s sim.Strategy, done, total time.Duration) {
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
		parts := make([]string, len(order))
		for i, o := range order {
			parts[i] = fmt.Sprintf("%s %d%%", o, pct[o])
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
