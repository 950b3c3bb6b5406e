package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/plancmd"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/upstreamcmd"
	"github.com/riverslot/riverslot/slotplan"
)

const planAbout = `Prints a cycle's slots and, with --account, the account's bucket, slot,
offset and next three sync times. It needs no database; with --database-url
it also reads whether a weighted task (Task.Weight) pinned the account to
another slot, and then prints the times of the slot it is served in: the
pinned slot of each cycle whose pins exist, and for later cycles the pin of
the latest pinned cycle (pins are sticky). With --opposite, the second task
follows the first one's pins shifted by half the slots, as the library does.
With --database-url and --upstreams EXPR (the task's Upstream), it also counts
each upstream's accounts in --table and prints the rate the cycle and its
busiest slot need of it against what its limits let through, as riverslot
upstream check does: min(Rate, Concurrency / latency), where Rate is
--upstream-rate and Concurrency --upstream-concurrency (or an operator's
overrides in --river-schema), and latency is how long one sync's call takes
(--upstream-latency; without it the concurrency limit is not weighed, and
plan says so). It exits 1 when an upstream cannot fit in a cycle, naming the
bound and what to raise.
`

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if monthlyCycle(args) {
		return runPlanMonthly(ctx, args, stdout, stderr)
	}
	fs := newFlagSet("plan", planAbout, stderr)
	cycle := durationFlag(fs, "cycle", 24*time.Hour, "cycle length: a whole number of seconds, a multiple of 2s (24h, 8h, 120s), or monthly (calendar months in --location; see plan --cycle monthly -h)")
	buckets := fs.Int("buckets", slotplan.Buckets, "the task's Buckets: 256 (last UUID byte) or 65536 (last two bytes; 24h gives 1024 slots)")
	anchor := fs.String("anchor", "00:00", "time of day HH:MM[:SS] at which cycles start (in --tz)")
	tz := fs.String("tz", "", "IANA time zone of --anchor, e.g. Europe/London; empty: an absolute UTC grid")
	account := fs.String("account", "", "account UUID: print its bucket, slot, offset and next three sync times")
	task := fs.String("task", "transactions", "task name; the default offset seed is derived from it, as in the library")
	seed := fs.Uint64("seed", 0, "offset seed; 0 means derived from --task, as in the library")
	now := fs.String("now", "", "RFC 3339 time to compute the next syncs from (default: the current time)")
	phase := fs.Float64("phase", 0, "the task's Phase, a fraction of the cycle in [0, 1): its slots shift by phase × slots")
	opposite := fs.String("opposite", "", "name of a second task with OppositeOf --task: print its slot and sync times too")
	svg := fs.String("svg", "", "also draw the slot circle (sample accounts at their due times; with --opposite both tasks, each account's two syncs joined) into this .svg file")
	databaseURL := fs.String("database-url", "", "PostgreSQL URL: with --account, read the account's pin of a weighted task (empty: the pins are not read, and plan says it cannot know)")
	pinsSchema := fs.String("pins-schema", "", "schema of the pins tables, the accounts table's Schema (empty: search_path)")
	upstreams := fs.String("upstreams", "", "the task's Upstream, a SQL expression over --table (e.g. bank_id): with --database-url, count each upstream's accounts and compare the rate the cycle needs of it with min(rate, concurrency / latency), as upstream check does (exit 1 when one cannot fit in a cycle)")
	table := fs.String("table", "accounts", "with --upstreams: the accounts table (in --pins-schema), with a uuid column id")
	filter := fs.String("filter", "", "with --upstreams: the task's Filter (empty: every row)")
	upstreamRate := fs.Float64("upstream-rate", 0, "with --upstreams: the task's Limits.Rate, syncs a second per upstream (0: none; an operator's override in --river-schema wins)")
	upstreamConcurrency := fs.Int("upstream-concurrency", 0, "with --upstreams: the task's Limits.Concurrency, syncs in flight per upstream (0: none; an operator's override in --river-schema wins)")
	upstreamLatency := durationFlag(fs, "upstream-latency", 0, "with --upstreams: how long one sync's call to its upstream takes, e.g. 800ms: Concurrency syncs in flight serve at most Concurrency / latency a second (0: unknown, the concurrency limit is not weighed)")
	shardRanges := fs.String("shard-ranges", "", "with --account, the task's shard map, NAME:LO-HI[,LO-HI]/NAME:LO-HI... over the 65,536 two-byte buckets (riverslot shards show prints it): print the account's shard")
	riverSchema := fs.String("river-schema", "", "with --upstreams: schema of River's tables, where operators' overrides of upstream limits live (empty: search_path)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	// Every flag is checked before anything is printed.
	if *buckets != slotplan.Buckets && *buckets != slotplan.BucketsTwoByte {
		return usageErr("--buckets must be %d or %d (Task.Buckets), got %d", slotplan.Buckets, slotplan.BucketsTwoByte, *buckets)
	}
	if err := checkCycleMin("--cycle", *cycle); err != nil {
		return err
	}
	plan, err := slotplan.NewBuckets(*cycle, *buckets)
	if err != nil {
		return usageErr("--cycle: %v", err)
	}
	offset, err := parseClock(*anchor)
	if err != nil {
		return usageErr("--anchor: %v", err)
	}
	var loc *time.Location
	if *tz != "" {
		if loc, err = time.LoadLocation(*tz); err != nil {
			return usageErr("--tz: unknown time zone %q; use an IANA name such as Europe/London", *tz)
		}
	}
	schedule, err := slotplan.NewSchedule(*cycle, offset, loc)
	if err != nil {
		return usageErr("--anchor/--cycle: %v", strings.Replace(err.Error(), "TriggerOffset", "the anchor", 1))
	}
	at, id, s, err := planInputs(*now, *account, *task, *seed)
	if err != nil {
		return err
	}
	var shardMap *slotplan.ShardMap
	if *shardRanges != "" {
		m, err := parseShardRanges(*shardRanges)
		if err != nil {
			return usageErr("--shard-ranges: %v", err)
		}
		shardMap = &m
	}
	if *phase < 0 || *phase >= 1 {
		return usageErr("--phase must be in [0, 1) (a fraction of the cycle), got %g", *phase)
	}
	shiftF := *phase * float64(plan.Slots)
	shift := int(math.Round(shiftF))
	if math.Abs(shiftF-float64(shift)) > 1e-9 {
		return usageErr("--phase × slots must be a whole number of slots, got %g × %d = %g; use a multiple of 1/%d", *phase, plan.Slots, shiftF, plan.Slots)
	}
	if *svg != "" {
		if err := checkSVGPath(*svg); err != nil {
			return err
		}
	}
	if *upstreams != "" && *databaseURL == "" {
		return usageErr("--upstreams needs --database-url: the accounts per upstream are counted in the accounts table")
	}
	if !(*upstreamRate >= 0) || math.IsInf(*upstreamRate, 0) {
		return usageErr("--upstream-rate must be a finite number of syncs a second, 0 for none, got %v", *upstreamRate)
	}
	if *upstreamConcurrency < 0 {
		return usageErr("--upstream-concurrency must be 0 (no limit) or more; got %d", *upstreamConcurrency)
	}
	if *upstreamLatency < 0 {
		return usageErr("--upstream-latency must be a positive duration such as 800ms, or 0 for unknown; got %s", *upstreamLatency)
	}
	tasks := []plancmd.Task{{Name: *task, Seed: s, Shift: shift}}
	if *opposite != "" {
		if err := checkTaskName(*opposite); err != nil {
			return usageErr("--opposite: %v", err)
		}
		if *opposite == *task {
			return usageErr("--opposite must name another task than --task %q", *task)
		}
		tasks = append(tasks, plancmd.Task{Name: *opposite, Seed: slotplan.SeedFromName(*opposite), Shift: plan.Shift(shift, plan.Slots/2)})
	}

	var check *upstreamcmd.CheckConfig
	if *upstreams != "" {
		if *riverSchema != "" {
			if err := checkSchemaName("--river-schema", *riverSchema); err != nil {
				return err
			}
		}
		check = &upstreamcmd.CheckConfig{RiverSchema: *riverSchema, Latency: *upstreamLatency, Task: riverslot.Task{
			Name: *task, Cycle: *cycle, Buckets: *buckets, Seed: s, Phase: *phase,
			Schema: *pinsSchema, Table: *table, Filter: *filter, Upstream: *upstreams,
			Limits: riverslot.UpstreamLimits{Rate: *upstreamRate, Concurrency: *upstreamConcurrency},
		}}
	}

	c := &plancmd.Config{Plan: plan, Schedule: schedule, Anchor: *anchor, Location: loc, Now: at, Tasks: tasks, ShardMap: shardMap,
		SVG: *svg, PinsSchema: *pinsSchema, Upstreams: check}
	if *account != "" {
		c.Account = &id
	}
	if *databaseURL != "" && (*account != "" || *upstreams != "") {
		pool, err := connect(ctx, *databaseURL, 2)
		if err != nil {
			return err
		}
		defer pool.Close()
		c.Pool = pool
		if check != nil {
			check.Pool = pool
		}
	}
	return planErr(plancmd.Run(ctx, c, stdout))
}

// planErr gives plan's errors their exit codes: bad input 2, an
// interruption 130.
func planErr(err error) error {
	if errors.Is(err, plancmd.ErrInterrupted) {
		return &exitError{code: 130, msg: "interrupted"}
	}
	return inputErr(err)
}

// parseClock parses HH:MM or HH:MM:SS into a duration after midnight.
func parseClock(s string) (time.Duration, error) {
	for _, layout := range []string{"15:04:05", "15:04"} {
		if t, err := time.Parse(layout, s); err == nil {
			return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second, nil
		}
	}
	return 0, fmt.Errorf("want HH:MM or HH:MM:SS, got %q", s)
}

// planInputs reads plan's --now (default: now), --account (optional) and
// the offset seed (--seed, else derived from --task).
func planInputs(now, account, task string, seed uint64) (time.Time, uuid.UUID, uint64, error) {
	at := time.Now()
	if now != "" {
		var err error
		if at, err = time.Parse(time.RFC3339, now); err != nil {
			return time.Time{}, uuid.Nil, 0, usageErr("--now must be RFC 3339, e.g. 2026-11-22T09:00:00Z: %v", err)
		}
	}
	var id uuid.UUID
	if account != "" {
		var err error
		if id, err = uuid.Parse(account); err != nil {
			return time.Time{}, uuid.Nil, 0, usageErr("--account must be a UUID such as 0b6e4f2a-8c1d-4f5e-9a7b-3c2d1e0f9a8b, got %q", account)
		}
	}
	if seed == 0 {
		if err := checkTaskName(task); err != nil {
			return time.Time{}, uuid.Nil, 0, err
		}
		seed = slotplan.SeedFromName(task)
	}
	return at, id, seed, nil
}
