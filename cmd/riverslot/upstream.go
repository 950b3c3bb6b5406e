package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/upstreamcmd"
	"github.com/riverslot/riverslot/internal/upstream"
)

const upstreamAbout = `Lists a task's upstreams (Task.Upstream's values) as the limiter holds
them in River's schema, or overrides one upstream's limits at run time:
every node reads an override on its next decision for a sync of that
upstream, no deploy needed.

  riverslot upstream list --schema S [--task T] [--after KEY] [--limit N] [--json]
  riverslot upstream set  --schema S --task T --key K [--rate R] [--burst B] [--concurrency C]
  riverslot upstream set  --schema S --task T --key K --clear
  riverslot upstream check --schema S --task T --table accounts --filter F
                           --upstream EXPR --cycle 24h --rate R
                           [--concurrency C --upstream-latency 800ms]

check counts the task's accounts per upstream and slot (one scan of the
accounts table) and compares the rate each upstream needs with what its
limits let through: min(Rate, Concurrency / latency), where Rate is
--rate and Concurrency --concurrency (or the key's overrides), and latency
is how long one sync's call takes (--upstream-latency; the limiter does
not measure it: without it the concurrency limit is not weighed, and check
says so). It compares over the cycle (an upstream that does not fit has
syncs skipped as upstream_throttled every cycle: exit 1, naming the bound
and what to raise) and in its busiest slot (one that fits the cycle but
not that slot has syncs waiting, later than their place: reported, exit 0).

set changes only the flags given; --rate 0 or --concurrency 0 lifts that
limit for the key; --clear drops the key's overrides (the task's Limits
apply). A key that has not synced yet can be given limits.

Exit codes: 0 success, 1 the database failed (or, for check, an upstream
cannot fit in a cycle), 2 bad input.
`

func runUpstream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "set" && args[0] != "check") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, upstreamAbout)
			return nil
		}
		return usageErr("upstream needs a subcommand: list, set or check (riverslot upstream -h)")
	}
	sub := args[0]
	if sub == "check" {
		return runUpstreamCheck(ctx, args[1:], stdout, stderr)
	}
	fs := newFlagSet("upstream "+sub, upstreamAbout, stderr)
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "demo")
	schema := fs.String("schema", "", "schema of River's tables (river.Config.Schema); required")
	task := fs.String("task", "", "the task's name (list: default every task)")
	var (
		key                       *string
		rate                      *float64
		burst, concurrency, limit *int
		clear, asJSON             *bool
		after                     *string
	)
	if sub == "set" {
		key = fs.String("key", "", "the upstream key (a value of Task.Upstream; \"\" is the task's default upstream)")
		rate = fs.Float64("rate", 0, "syncs started per second (0: no rate limit for the key)")
		burst = fs.Int("burst", 0, "syncs that may start at once above the rate")
		concurrency = fs.Int("concurrency", 0, "syncs in flight (0: no concurrency limit for the key)")
		clear = fs.Bool("clear", false, "drop the key's overrides: the task's Limits apply")
	} else {
		after = fs.String("after", "", "list the keys after this one (the last key of the previous page)")
		limit = fs.Int("limit", 100, "at most this many keys (2-10000)")
		asJSON = fs.Bool("json", false, "print a JSON array instead of the table")
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := checkSchemaName("--schema", *schema); err != nil {
		return err
	}
	if *task != "" || sub == "set" {
		if err := checkTaskName(*task); err != nil {
			return err
		}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var o upstream.Override
	if sub == "set" {
		if len(*key) > upstream.MaxKeyLen {
			return usageErr("--key is %d bytes; upstream keys are at most %d (the fan-out cuts longer values)", len(*key), upstream.MaxKeyLen)
		}
		if given["rate"] {
			if *rate < 0 || math.IsNaN(*rate) || math.IsInf(*rate, 0) {
				return usageErr("--rate must be a finite number of syncs per second, 0 for no limit; got %v", *rate)
			}
			o.Rate = rate
		}
		if given["burst"] {
			if *burst < 0 {
				return usageErr("--burst must be 0 or more; got %d", *burst)
			}
			o.Burst = burst
		}
		if given["concurrency"] {
			if *concurrency < 0 {
				return usageErr("--concurrency must be 0 (no limit) or more; got %d", *concurrency)
			}
			o.Concurrency = concurrency
		}
		o.Clear = *clear
		if o.Clear && (o.Rate != nil || o.Burst != nil || o.Concurrency != nil) {
			return usageErr("--clear drops every override of the key; give it alone, or give --rate, --burst or --concurrency without it")
		}
		if !o.Clear && o.Rate == nil && o.Burst == nil && o.Concurrency == nil {
			return usageErr("set needs --rate, --burst, --concurrency or --clear")
		}
	} else if *limit < 2 || *limit > 10000 {
		return usageErr("--limit must be 2-10000, got %d", *limit)
	} else if *task == "" && *after != "" {
		return usageErr("--after needs --task: keys are paged within one task")
	}

	pool, err := connect(ctx, databaseURL(), 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if sub == "set" {
		return inputErr(upstreamcmd.Set(ctx, pool, *schema, *task, *key, o, stdout))
	}
	return inputErr(upstreamcmd.List(ctx, &upstreamcmd.ListConfig{Pool: pool, Schema: *schema, Task: *task, After: *after, Limit: *limit, JSON: *asJSON}, stdout))
}

func runUpstreamCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("upstream check", upstreamAbout, stderr)
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "demo")
	tf := addTaskFlags(fs)
	expr := fs.String("upstream", "", "the task's Upstream: SQL expression over the accounts table naming each account's upstream (empty: one upstream)")
	rate := fs.Float64("rate", 0, "the task's Limits.Rate: syncs a second per upstream (0: no limit)")
	concurrency := fs.Int("concurrency", 0, "the task's Limits.Concurrency: syncs in flight per upstream (0: no limit)")
	latency := durationFlag(fs, "upstream-latency", 0, "how long one sync's call to its upstream takes, e.g. 800ms: Concurrency syncs in flight serve at most Concurrency / latency a second (0: unknown, the concurrency limit is not weighed)")
	asJSON := fs.Bool("json", false, "print a JSON array instead of the table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := tf.check(); err != nil {
		return err
	}
	if *concurrency < 0 {
		return usageErr("--concurrency must be 0 (no limit) or more; got %d", *concurrency)
	}
	if *latency < 0 {
		return usageErr("--upstream-latency must be a positive duration such as 800ms, or 0 for unknown; got %s", *latency)
	}
	pool, err := connect(ctx, databaseURL(), 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	rt := tf.riverTask()
	rt.Upstream, rt.Limits = *expr, riverslot.UpstreamLimits{Rate: *rate, Concurrency: *concurrency}
	budgets, err := upstreamcmd.Check(ctx, &upstreamcmd.CheckConfig{Pool: pool, RiverSchema: *tf.schema, Task: rt, Latency: *latency})
	if err != nil {
		return inputErr(err)
	}
	return upstreamcmd.WriteCheck(stdout, budgets, *asJSON)
}
