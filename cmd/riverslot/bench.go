package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/bench"
)

const benchAbout = `Runs the benchmarks against Postgres: fan-out, selection, deep queue, queue
depth, weights, and, only when named in --only, synctier (riverslot's sync
worker with a no-op Sync against River's no-op worker, same jobs, same
MaxWorkers) and scale: a fleet of
--scale-accounts accounts through seeding, CreateIndexes, bootstraps, one
slot's fan-out at 1,024 slots, Status and a compressed run. It creates and drops schemas named riverslot_bench_<benchmark>_<n>,
dropping any existing schema of such a name first: point it at a database of
its own (make bench uses riverslot_bench).
`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", benchAbout, stderr)
	databaseURL := databaseURLFlag(fs, defaultBenchURL, "bench")
	fanOut := fs.String("fanout-sizes", "100000,1000000", "accounts in the one-slot fan-out benchmark, comma-separated")
	selection := fs.String("selection-sizes", "1000000,10000000", "accounts in the selection benchmark, comma-separated")
	textSlots := fs.Int("text-slots", 4, "slots timed with the (slow) text predicate; the cycle figure extrapolates to 128")
	deepQueue := fs.Int("deep-queue", 1_000_000, "accounts in the deep-queue benchmark (naive queue holds all of them)")
	depthAccounts := fs.Int("depth-accounts", 10_000, "accounts in the queue-depth run")
	depthCycle := fs.Duration("depth-cycle", 120*time.Second, "cycle of the queue-depth run")
	depthWork := fs.Duration("depth-work", 20*time.Millisecond, "simulated work per sync in the queue-depth run")
	batch := fs.Int("batch-size", 2000, "fan-out and raw insert batch size")
	reps := fs.Int("reps", 3, "repetitions of each fan-out comparison (medians reported)")
	outDir := fs.String("out-dir", "docs", "directory for queue_depth.csv")
	chartPath := fs.String("chart", "docs/queue-depth.svg", "SVG chart of the queue-depth run (empty: none)")
	weightsAccounts := fs.Int("weights-accounts", 1_000_000, "accounts in the weights benchmark (placement quality, churn and weighted selection)")
	weightsChart := fs.String("weights-chart", "docs/weights.svg", "SVG chart of per-slot weight, hash-only beside balanced (empty: none)")
	scaleAccounts := fs.Int("scale-accounts", 10_000_000, "accounts the scale benchmark seeds (--only scale)")
	scaleRunAccounts := fs.Int("scale-run-accounts", 50_000, "accounts of the scale benchmark's compressed run (at most --scale-accounts)")
	scaleRunCycle := fs.Duration("scale-run-cycle", 4*time.Minute, "cycle of the scale benchmark's compressed run")
	scaleRunRetention := fs.Duration("scale-run-retention", time.Minute, "River's CompletedJobRetentionPeriod in the scale benchmark's compressed run")
	syncTierJobs := fs.Int("synctier-jobs", 100_000, "jobs per side in the sync-tier benchmark (riverslot's sync worker with a no-op Sync against River's no-op worker)")
	syncTierWorkers := fs.Int("synctier-workers", 400, "MaxWorkers of the sync-tier benchmark's queue, both sides")
	serveSchedules := fs.Int("serve-schedules", 100_000, "schedules of 1h the serve benchmark creates through the API (--only serve)")
	serveRunSchedules := fs.Int("serve-run-schedules", 2_000, "schedules of 16 s in the serve benchmark's compressed run of three periods")
	only := fs.String("only", "", "run only these benchmarks: fanout, selection, deepqueue, depth, weights, synctier, scale, serve (comma-separated; synctier, scale and serve run only when named)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	cfg := bench.Config{
		Out: stdout, Log: stderr, TextSlotsSampled: *textSlots, DeepQueue: *deepQueue,
		DepthAccounts: *depthAccounts, DepthCycle: *depthCycle, DepthWork: *depthWork,
		BatchSize: *batch, Reps: *reps, OutDir: *outDir, ChartPath: *chartPath, Only: map[string]bool{},
		WeightsAccounts: *weightsAccounts, WeightsChartPath: *weightsChart,
		SyncTierJobs: *syncTierJobs, SyncTierWorkers: *syncTierWorkers,
		ServeSchedules: *serveSchedules, ServeRunSchedules: *serveRunSchedules,
		ScaleAccounts: *scaleAccounts, ScaleRunAccounts: *scaleRunAccounts, ScaleRunCycle: *scaleRunCycle, ScaleRunRetention: *scaleRunRetention,
	}
	var err error
	if cfg.FanOutSizes, err = parseSizes("--fanout-sizes", *fanOut); err != nil {
		return err
	}
	if cfg.SelectionSizes, err = parseSizes("--selection-sizes", *selection); err != nil {
		return err
	}
	for _, name := range strings.Split(*only, ",") {
		switch name = strings.TrimSpace(name); name {
		case "":
		case "fanout", "selection", "deepqueue", "depth", "weights", "synctier", "scale", "serve":
			cfg.Only[name] = true
		default:
			return usageErr("--only: unknown benchmark %q; use fanout, selection, deepqueue, depth, weights, synctier, scale or serve", name)
		}
	}
	switch {
	case *batch < 1:
		return usageErr("--batch-size must be at least 1, got %d", *batch)
	case *reps < 1:
		return usageErr("--reps must be at least 1, got %d", *reps)
	case *textSlots < 1 || *textSlots > 128:
		return usageErr("--text-slots must be between 1 and 128 (the slots of the 24h cycle it samples), got %d", *textSlots)
	case *deepQueue < 1 || *depthAccounts < 1:
		return usageErr("--deep-queue and --depth-accounts must be at least 1")
	case *weightsAccounts < 1000:
		return usageErr("--weights-accounts must be at least 1000 (128 slots), got %d", *weightsAccounts)
	case *scaleAccounts < 1024:
		return usageErr("--scale-accounts must be at least 1024 (one per slot of the 1,024-slot task), got %d", *scaleAccounts)
	case *scaleRunAccounts < 1 || *scaleRunAccounts > *scaleAccounts:
		return usageErr("--scale-run-accounts must be between 1 and --scale-accounts (%d), got %d", *scaleAccounts, *scaleRunAccounts)
	case *scaleRunRetention < time.Second:
		return usageErr("--scale-run-retention must be at least 1s (River's CompletedJobRetentionPeriod), got %s", *scaleRunRetention)
	case *serveSchedules < 1 || *serveRunSchedules < 1:
		return usageErr("--serve-schedules and --serve-run-schedules must be at least 1")
	case *syncTierJobs < 1:
		return usageErr("--synctier-jobs must be at least 1, got %d", *syncTierJobs)
	case *syncTierWorkers < 1 || *syncTierWorkers > river.QueueNumWorkersMax:
		return usageErr("--synctier-workers must be between 1 and %d (River's limit per queue), got %d", river.QueueNumWorkersMax, *syncTierWorkers)
	case *depthWork < 0:
		return usageErr("--depth-work must not be negative, got %s", *depthWork)
	}
	if err := checkCycle("--depth-cycle", *depthCycle); err != nil {
		return err
	}
	if err := checkCycle("--scale-run-cycle", *scaleRunCycle); err != nil {
		return err
	}

	pool, err := connect(ctx, databaseURL(), 30)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg.Pool = pool

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	begun := time.Now()
	if err := bench.New(cfg).Run(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench: finished in %s\n", time.Since(begun).Round(time.Second))
	return nil
}

func parseSizes(flagName, s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(strings.ReplaceAll(part, "_", ""))
		if err != nil || n < 1 {
			return nil, usageErr("%s: want positive integers separated by commas, got %q", flagName, part)
		}
		out = append(out, n)
	}
	return out, nil
}
