package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/riverslot/riverslot/internal/upstream"
)

const upstreamAbout = `Lists a task's upstreams (Task.Upstream's values) as the limiter holds
them in River's schema, or overrides one upstream's limits at run time:
every node reads an override on its next decision for a sync of that
upstream, no deploy needed.

  riverslot upstream list --schema S [--task T] [--after KEY] [--limit N] [--json]
  riverslot upstream set  --schema S --task T --key K [--rate R] [--burst B] [--concurrency C]
  riverslot upstream set  --schema S --task T --key K --clear

set changes only the flags given; --rate 0 or --concurrency 0 lifts that
limit for the key; --clear drops the key's overrides (the task's Limits
apply). A key that has not synced yet can be given limits.

Exit codes: 0 success, 1 the database failed, 2 bad input.
`

func runUpstream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "set") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, upstreamAbout)
			return nil
		}
		return usageErr("upstream needs a subcommand: list or set (riverslot upstream -h)")
	}
	sub := args[0]
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
		limit = fs.Int("limit", 100, "at most this many keys (1-10000)")
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
	} else if *limit < 1 || *limit > 10000 {
		return usageErr("--limit must be 1-10000, got %d", *limit)
	}

	pool, err := connect(ctx, databaseURL(), 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	lim := upstream.New(*schema)
	if sub == "set" {
		if err := lim.Set(ctx, pool, *task, *key, o); err != nil {
			return upstreamErr(err)
		}
		fmt.Fprintf(stdout, "upstream %q of task %q: limits set; every node applies them on its next decision\n", *key, *task)
		return nil
	}
	list, err := lim.List(ctx, pool, *task, *after, *limit)
	if err != nil {
		return upstreamErr(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		type row struct {
			Task        string     `json:"task"`
			Key         string     `json:"key"`
			Rate        *float64   `json:"rate_override"`
			Burst       *int       `json:"burst_override"`
			Concurrency *int       `json:"concurrency_override"`
			Breaker     string     `json:"breaker"`
			OpenUntil   *time.Time `json:"open_until,omitempty"`
			PausedUntil *time.Time `json:"paused_until,omitempty"`
			InFlight    int        `json:"in_flight"`
			Waiting     int        `json:"waiting"`
			Calls       int64      `json:"calls"`
			Failed      int64      `json:"failed"`
			Throttled   int64      `json:"throttled"`
			Deferred    int64      `json:"deferred"`
			Skipped     int64      `json:"skipped"`
			Probes      int64      `json:"probes"`
			Opens       int64      `json:"opens"`
		}
		rows := make([]row, 0, len(list))
		for _, s := range list {
			rows = append(rows, row{s.Task, s.Key, s.Rate, s.Burst, s.Concurrency, s.Breaker, s.OpenUntil, s.PausedUntil,
				s.InFlight, s.Waiting, s.Calls, s.Failed, s.Throttled, s.Deferred, s.Skipped, s.Probes, s.Opens})
		}
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKEY\tRATE\tBURST\tCONC\tBREAKER\tIN FLIGHT\tWAITING\tCALLS\tFAILED\tTHROTTLED\tDEFERRED\tSKIPPED\tPROBES")
	opt := func(p *int) string {
		if p == nil {
			return "task"
		}
		return strconv.Itoa(*p)
	}
	for _, s := range list {
		r := "task"
		if s.Rate != nil {
			r = strconv.FormatFloat(*s.Rate, 'g', -1, 64)
		}
		fmt.Fprintf(tw, "%s\t%q\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", s.Task, s.Key, r, opt(s.Burst), opt(s.Concurrency), s.Breaker,
			s.InFlight, s.Waiting, s.Calls, s.Failed, s.Throttled, s.Deferred, s.Skipped, s.Probes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(list) == *limit {
		fmt.Fprintf(stdout, "(more: --after %q)\n", list[len(list)-1].Key)
	}
	return nil
}

// upstreamErr makes missing tables bad input (exit 2), with the fix.
func upstreamErr(err error) error {
	if errors.Is(err, upstream.ErrMissing) {
		return usageErr("%v", err)
	}
	return err
}
