package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/demo"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
	"github.com/riverslot/riverslot/slotplan"
)

const demoAbout = `Runs compressed live cycles of slot scheduling against Postgres and reports
them: accounts synced once, missed or duplicated, start lateness and peak
pending sync jobs, all measured from River's job table.

The demo creates its schema (--schema) and marks it as its own. Each run
drops and recreates that schema (unless --keep); it refuses, before touching
anything, a schema that exists and was not created by the demo.
`

// cycleStartAheadMax is how far ahead --cycle-start may be.
const cycleStartAheadMax = 24 * time.Hour

// shardsMax is the most databases demo --shards takes.
const shardsMax = 16

// demoOptions are the demo's flags: the run's Config (its pools set by
// runDemo) and the databases to connect it to.
type demoOptions struct {
	demo.Config
	databaseURL string
	// accountsURL is the database of the accounts table ("": databaseURL).
	accountsURL string
	// shardURLs: --shards, the databases of a sharded run (nil: one).
	shardURLs []string
}

func parseDemoFlags(args []string, stderr io.Writer) (*demoOptions, error) {
	fs := newFlagSet("demo", demoAbout, stderr)
	o := &demoOptions{}
	var upstreams demoUpstreamOptions
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "demo")
	fs.StringVar(&o.accountsURL, "accounts-database-url", "", "PostgreSQL URL of another database for the accounts table (the demo creates it there, in a schema named --schema; River's database then holds nothing of the accounts); default: --database-url")
	fs.IntVar(&o.Accounts, "accounts", 10_000, "number of random UUIDv4 accounts to seed")
	cycle := &cycleValue{d: 120 * time.Second}
	fs.Var(cycle, "cycle", "cycle length: a whole number of seconds, a multiple of 2s, at most 24h (120s = 8 slots of 15s); monthly is refused: the demo runs its cycles live, and a calendar month takes a month (run one with worker --cycle monthly)")
	location := fs.String("location", "", "with --cycle monthly, the IANA time zone of the months: refused as --cycle monthly is (worker takes both)")
	fs.IntVar(&o.Cycles, "cycles", 1, "number of consecutive cycles to run")
	fs.IntVar(&o.Workers, "workers", 0, "River MaxWorkers for the demo queue (0: sized for the fleet, at least 50: enough to start accounts/cycle syncs a second at 70% of the queue's MaxWorkers x 10 a second, riverslot.MaxWorkersFor)")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object on stdout instead of the table (progress stays on stderr)")
	cycleStart := fs.String("cycle-start", "", "RFC 3339 start of the first cycle, in the next 24h (default: the periodic trigger's lead from now, so the trigger starts it at once)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the demo's schema and accounts: do not drop and reseed; a rerun resumes an unfinished cycle")
	fs.StringVar(&o.Schema, "schema", "riverslot_demo", "schema the demo creates for River's tables and the accounts; it must not exist or be one the demo created")
	fs.StringVar(&o.Task, "task", "demo", "task name")
	shards := fs.String("shards", "", "URL,URL,...: run the task over several databases, one shard each (schema <--schema>_s1, _s2...; a URL may repeat), its buckets split evenly by slots (docs/shards.md), one River client per shard; reports each shard and all")
	fs.BoolVar(&o.Reciprocal, "reciprocal", false, "run a second task, <task>_opposite, over the same accounts, opposite the first (OppositeOf): no account is synced by both within half a cycle minus one slot")
	fs.StringVar(&o.Weights, "weights", "", "pareto: give every account a weight (column weight, Pareto(1.5) from a fixed seed) and run the task weighted (Task.Weight), reporting per-slot weight max/mean against hash-only placement")
	fs.BoolVar(&o.FanOutBaseline, "fanout-baseline", false, "after the run, time River's own insert of a mean slot's sync jobs (their four fields) into the same river_job, and report the live fan-out's rate against it (fanout_vs_raw_insert)")
	fs.DurationVar(&o.CompletedRetention, "completed-retention", time.Hour, "River's CompletedJobRetentionPeriod: how long River keeps completed jobs (0: River's 24h); riverslot's ledger keeps cycles unique whatever it is, e.g. 1m. The default, 1h, keeps the demo under Check's row budget")
	addDemoUpstreamFlags(fs, &upstreams)
	logLevel := logLevelFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := checkDemoCycle(cycle, *location); err != nil {
		return nil, err
	}
	o.Cycle = cycle.d
	if err := upstreams.check(); err != nil {
		return nil, err
	}
	o.Upstreams = upstreams.simUpstreams()
	o.databaseURL = databaseURL()
	if o.CompletedRetention < 0 {
		return nil, usageErr("--completed-retention must be 0 (River's default, 24h) or a positive duration such as 1m, got %s", o.CompletedRetention)
	}
	if o.Weights != "" && o.Weights != "pareto" {
		return nil, usageErr("--weights must be pareto (or omitted for unweighted accounts), got %q", o.Weights)
	}
	o.LogLevel = *logLevel

	switch {
	case o.Accounts < 1:
		return nil, usageErr("--accounts must be at least 1, got %d", o.Accounts)
	case o.Cycles < 1:
		return nil, usageErr("--cycles must be at least 1, got %d", o.Cycles)
	case o.Workers < 0 || o.Workers > river.QueueNumWorkersMax:
		return nil, usageErr("--workers must be between 1 and %d (River's limit per queue), or 0 to size it for the fleet, got %d", river.QueueNumWorkersMax, o.Workers)
	}
	if o.Workers == 0 {
		tasks := int64(1)
		if o.Reciprocal {
			tasks = 2 // both tasks' syncs share the queue
		}
		need := riverslot.MaxWorkersFor(tasks*int64(o.Accounts), o.Cycle)
		o.Workers = min(max(50, need), river.QueueNumWorkersMax)
		if need > o.Workers {
			fmt.Fprintf(stderr, "riverslot demo: the fleet needs %d workers to start its syncs in time, more than River's %d per queue; the demo runs with %d and its syncs will start late (lengthen --cycle or lower --accounts)\n",
				need, river.QueueNumWorkersMax, o.Workers)
		}
	}
	if err := checkSchemaName("--schema", o.Schema); err != nil {
		return nil, err
	}
	if *shards != "" {
		urls, err := parseShardURLs(*shards)
		if err != nil {
			return nil, err
		}
		switch {
		case o.accountsURL != "" || o.Keep || o.Reciprocal || o.Weights != "" || o.FanOutBaseline || o.Upstreams.Count > 0:
			return nil, usageErr("--shards runs the plain task: leave out --accounts-database-url, --keep, --reciprocal, --weights, --fanout-baseline and --upstreams")
		}
		o.shardURLs = urls
	}
	if err := checkTaskName(o.Task); err != nil {
		return nil, err
	}
	if err := checkCycle("--cycle", o.Cycle); err != nil {
		return nil, err
	}
	if *cycleStart != "" {
		t, err := time.Parse(time.RFC3339, *cycleStart)
		if err != nil {
			return nil, usageErr("--cycle-start must be RFC 3339, e.g. 2026-11-22T10:00:00Z, got %q", *cycleStart)
		}
		now := time.Now()
		switch {
		case !t.After(now):
			return nil, usageErr("--cycle-start %s is in the past (now %s): its slots would be due before the demo enqueues them; "+
				"pass a future time, or omit --cycle-start to start as soon as the trigger can", *cycleStart, now.UTC().Format(time.RFC3339))
		case t.After(now.Add(cycleStartAheadMax)):
			return nil, usageErr("--cycle-start %s is more than %s ahead: the demo would wait that long; "+
				"pass a time within %s, or omit --cycle-start to start as soon as the trigger can", *cycleStart, cycleStartAheadMax, cycleStartAheadMax)
		}
		o.CycleStart = t
	}
	if err := checkDemoShards(o); err != nil {
		return nil, err
	}
	return o, nil
}

// checkDemoCycle refuses --cycle monthly (and --location, its time zone):
// the demo runs live cycles and waits for them to end, and it shortens a
// cycle only by its length, which a calendar month fixes. A monthly task
// runs as an app runs it, through worker.
func checkDemoCycle(cycle *cycleValue, location string) error {
	switch {
	case cycle.monthly:
		return usageErr("--cycle monthly: the demo runs its cycles live and waits for each to end, and a calendar month takes a month (its slots are days); " +
			"run a monthly task with `riverslot worker --cycle monthly --location ZONE`, print a month's days and an account's place in it with " +
			"`riverslot plan --cycle monthly --location ZONE`, or demo a cycle of 24h or less, e.g. --cycle 120s")
	case location != "":
		return usageErr("--location names the time zone of a calendar-month task, which the demo does not run (--cycle monthly is refused): leave it out")
	}
	return nil
}

// checkDemoShards refuses --shards that the cycle cannot split.
func checkDemoShards(o *demoOptions) error {
	if n := len(o.shardURLs); n > 0 {
		if plan, err := slotplan.New(o.Cycle); err == nil && plan.Slots < n {
			return usageErr("--cycle %s has %d slots, fewer than the %d --shards: give a cycle of more slots (a multiple of 256 s has 256)", o.Cycle, plan.Slots, n)
		}
	}
	return nil
}

// parseShardURLs splits --shards.
func parseShardURLs(s string) ([]string, error) {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	if len(out) < 1 || len(out) > shardsMax {
		return nil, usageErr("--shards needs 1 to %d comma-separated PostgreSQL URLs (one per shard; a URL may repeat: each shard gets schema <--schema>_s<N>), got %d", shardsMax, len(out))
	}
	return out, nil
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseDemoFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.shardURLs != nil {
		for i, url := range o.shardURLs {
			pool, err := connectFlag(ctx, "--shards ("+demo.ShardName(i)+")", url, int32(min(20, o.Workers+5)))
			if err != nil {
				return err
			}
			defer pool.Close()
			o.ShardPools = append(o.ShardPools, pool)
		}
		for i := range o.ShardPools {
			if err := checkSchemaName("--schema", o.Schema+"_"+demo.ShardName(i)); err != nil {
				return err
			}
		}
	} else {
		// At most 20 connections, fewer for a small --workers: a few demos
		// (the tests run several) must fit in Postgres' default 100.
		if o.Pool, err = connect(ctx, o.databaseURL, int32(min(20, max(o.Workers, 1)+5))); err != nil {
			return err
		}
		defer o.Pool.Close()
		// Progress reads get their own connection: with more workers than
		// connections, a read queued behind the workers would stall the
		// display (and skip a slot's line) exactly when a slot's jobs come
		// due.
		if o.Monitor, err = connect(ctx, o.databaseURL, 1); err != nil {
			return err
		}
		defer o.Monitor.Close()
		if o.accountsURL != "" {
			if o.AccountsPool, err = connectFlag(ctx, "--accounts-database-url", o.accountsURL, int32(min(10, max(o.Workers, 1)+2))); err != nil {
				return err
			}
			defer o.AccountsPool.Close()
		}
	}

	report, err := demo.Run(ctx, &o.Config, stderr, isTerminal(stderr))
	if report != nil {
		if err := printDemoReport(stdout, report, o.JSON); err != nil {
			return err
		}
	}
	var foreign *demo.ForeignSchemaError
	switch {
	case errors.Is(err, demo.ErrInterrupted):
		return &exitError{code: 130, msg: err.Error()}
	case errors.As(err, &foreign):
		return usageErr("%v", foreign)
	}
	return err
}

// printDemoReport prints the report as JSON or as tables followed by the
// last cycle's status.
func printDemoReport(w io.Writer, report *demo.Report, asJSON bool) error {
	if asJSON {
		return report.WriteJSON(w)
	}
	if err := report.WriteText(w); err != nil {
		return err
	}
	if report.Status != nil {
		fmt.Fprintln(w)
		inspect.WriteStatus(w, report.Status)
	}
	return nil
}
