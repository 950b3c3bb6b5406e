package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
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
busiest slot need of it against its limit (--upstream-rate, or an operator's
override in --river-schema); it exits 1 when an upstream cannot fit in a cycle.
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
	upstreams := fs.String("upstreams", "", "the task's Upstream, a SQL expression over --table (e.g. bank_id): with --database-url, count each upstream's accounts and compare the rate the cycle needs of it with its limit (exit 1 when one cannot fit in a cycle)")
	table := fs.String("table", "accounts", "with --upstreams: the accounts table (in --pins-schema), with a uuid column id")
	filter := fs.String("filter", "", "with --upstreams: the task's Filter (empty: every row)")
	upstreamRate := fs.Float64("upstream-rate", 0, "with --upstreams: the task's Limits.Rate, syncs a second per upstream (0: none; an operator's override in --river-schema wins)")
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
	tasks := []planTask{{name: *task, seed: s, shift: shift}}
	if *opposite != "" {
		if err := checkTaskName(*opposite); err != nil {
			return usageErr("--opposite: %v", err)
		}
		if *opposite == *task {
			return usageErr("--opposite must name another task than --task %q", *task)
		}
		tasks = append(tasks, planTask{name: *opposite, seed: slotplan.SeedFromName(*opposite), shift: plan.Shift(shift, plan.Slots/2)})
	}

	// Everything is computed before anything is printed, so a schedule that
	// cannot answer fails without half a report.
	current, next, err := cycleAround(schedule, at)
	if err != nil {
		return err
	}
	if *svg != "" {
		var highlight *uuid.UUID
		if *account != "" {
			highlight = &id
		}
		if err := writePlanSVG(*svg, plan, tasks, highlight); err != nil {
			return fmt.Errorf("error writing --svg %s: %w", *svg, err)
		}
	}
	var pin *pinLookup
	if *account != "" && *databaseURL != "" {
		starts, err := cycleStarts(ctx, schedule, at, syncsShown+1)
		if err != nil {
			return err
		}
		if pin, err = lookupPin(ctx, *databaseURL, *pinsSchema, tasks[0].name, taskspec.PlanID(plan, s, shift), id, starts); err != nil {
			return err
		}
		if err := pin.check(plan, id); err != nil {
			return err
		}
	}
	if *account != "" {
		for i := range tasks {
			pt := &tasks[i]
			slotIn := func(start time.Time) int { return pin.servedSlot(plan, tasks[0], *pt, id, start).slot }
			if pt.syncs, err = nextSyncsIn(ctx, schedule, plan, pt.seed, id, at, syncsShown, slotIn); err != nil {
				return err
			}
		}
	}

	var (
		budgets   []riverslot.UpstreamBudget
		budgetErr error
	)
	if *upstreams != "" {
		task := riverslot.Task{Name: *task, Cycle: *cycle, Buckets: *buckets, Seed: s, Phase: *phase,
			Schema: *pinsSchema, Table: *table, Filter: *filter, Upstream: *upstreams, Limits: riverslot.UpstreamLimits{Rate: *upstreamRate}}
		if budgets, err = planBudgets(ctx, *databaseURL, *riverSchema, task); err != nil {
			return err
		}
	}

	where := "UTC grid from the Unix epoch"
	if loc != nil {
		where = "wall clock in " + loc.String()
	}
	fmt.Fprintf(stdout, "cycle          %s (%d s)\n", *cycle, int64(*cycle/time.Second))
	if plan.Buckets == slotplan.BucketsTwoByte {
		fmt.Fprintf(stdout, "slots          %d = gcd(%d ms, 65536)\n", plan.Slots, int64(*cycle/time.Millisecond))
		fmt.Fprintf(stdout, "slot duration  %s\n", plan.SlotDuration)
		fmt.Fprintf(stdout, "buckets/slot   %d of 65536 (bucket = byte 15 x 256 + byte 14 of the UUID)\n", plan.BucketsPerSlot)
	} else {
		fmt.Fprintf(stdout, "slots          %d = gcd(%d, 256)\n", plan.Slots, int64(*cycle/time.Second))
		fmt.Fprintf(stdout, "slot duration  %s\n", plan.SlotDuration)
		fmt.Fprintf(stdout, "buckets/slot   %d (bucket = last byte of the UUID)\n", plan.BucketsPerSlot)
	}
	fmt.Fprintf(stdout, "cycle starts   %s + k*%s, %s\n", *anchor, *cycle, where)
	fmt.Fprintf(stdout, "current cycle  %s\n", current.Format(time.RFC3339))
	fmt.Fprintf(stdout, "next cycle     %s\n\n", next.Format(time.RFC3339))

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "slot\tstarts after cycle start\tends\tbuckets")
	for slot := range plan.Slots {
		lo, hi := plan.BucketRange(slot)
		start := time.Duration(slot) * plan.SlotDuration
		if plan.Buckets == slotplan.BucketsTwoByte {
			fmt.Fprintf(tw, "%d\t+%s\t+%s\t%d-%d (0x%04x-0x%04x)\n", slot, clock(start), clock(start+plan.SlotDuration), lo, hi, lo, hi)
		} else {
			fmt.Fprintf(tw, "%d\t+%s\t+%s\t%d-%d (0x%02x-0x%02x)\n", slot, clock(start), clock(start+plan.SlotDuration), lo, hi, lo, hi)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if *upstreams != "" {
		fmt.Fprintf(stdout, "\nupstreams (%s) of task %s against their rate limits:\n", *upstreams, *task)
		// An upstream that cannot fit is exit 1, after the account's times.
		budgetErr = printUpstreamBudgets(stdout, budgets, false)
	}
	if *account == "" {
		return budgetErr
	}
	fmt.Fprintf(stdout, "\naccount        %s\n", id)
	if plan.Buckets == slotplan.BucketsTwoByte {
		fmt.Fprintf(stdout, "bucket         %d (0x%04x: byte 15 0x%02x, byte 14 0x%02x)\n", plan.BucketOf(id), plan.BucketOf(id), id[15], id[14])
	} else {
		fmt.Fprintf(stdout, "bucket         %d (0x%02x)\n", id[15], id[15])
	}
	if m := shardMap; m != nil {
		b := slotplan.BucketOf(id, slotplan.BucketsTwoByte)
		owner := m.SlotOwner(plan, tasks[0].shift, plan.Shift(plan.SlotOf(id), tasks[0].shift))
		fmt.Fprintf(stdout, "shard          %s (two-byte bucket %d; its slot is served by %s)\n", m.Owner(b), b, owner)
	}
	asked := *databaseURL != ""
	for i, pt := range tasks {
		slot := plan.Shift(plan.SlotOf(id), pt.shift)
		off := plan.Offset(pt.seed, id)
		if len(tasks) > 1 || pt.shift != 0 {
			fmt.Fprintf(stdout, "task           %s (slots shifted by %d)\n", pt.name, pt.shift)
		}
		if pin.pinned() {
			fmt.Fprintf(stdout, "slot           %d of %d (slots numbered from 0): its hash slot, but it is pinned\n", slot, plan.Slots)
		} else {
			fmt.Fprintf(stdout, "slot           %d of %d (slots numbered from 0)\n", slot, plan.Slots)
		}
		due := slot
		if i == 0 {
			fmt.Fprintf(stdout, "pinned         %s\n", pin.describe(asked, plan, off))
		} else if pin.pinned() {
			fmt.Fprintf(stdout, "pinned         %s\n", pin.describeOpposite(plan, tasks[0], pt, off))
		}
		if pin.pinned() {
			due = plan.Shift(int(*pin.slot), pt.shift-tasks[0].shift)
			fmt.Fprintf(stdout, "pinned slot    %d: +%s to +%s after each cycle start, while the pin of %s holds\n",
				due, clock(time.Duration(due)*plan.SlotDuration), clock(time.Duration(due+1)*plan.SlotDuration), pin.cycleStart.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(stdout, "offset         %s into the slot (seed %d)\n", off, pt.seed)
		fmt.Fprintf(stdout, "due            +%s after each cycle start\n", clock(time.Duration(due)*plan.SlotDuration+off))
		fmt.Fprintln(stdout, "next syncs (due time; River starts it within a few seconds):")
		for _, sync := range pt.syncs {
			fmt.Fprintf(stdout, "  %s\n", sync.due.Format(time.RFC3339Nano))
			if asked && pin.err == "" {
				where := pin.servedSlot(plan, tasks[0], pt, id, sync.cycleStart)
				start := plan.SlotStart(sync.cycleStart, where.slot)
				fmt.Fprintf(stdout, "    slot %d, %s to %s: %s\n", where.slot, start.Format(time.RFC3339Nano),
					start.Add(plan.SlotDuration).Format(time.RFC3339Nano), where.why)
			}
		}
	}
	return budgetErr
}

// syncsShown is how many next syncs plan prints.
const syncsShown = 3

// planTask is one task plan prints an account's times for.
type planTask struct {
	name  string
	seed  uint64
	shift int
	syncs []planSync
}

// planSync is one of an account's next syncs: its due time, in the cycle
// starting at cycleStart.
type planSync struct {
	due, cycleStart time.Time
}

// cycleSchedule is what plan needs of a slotplan.Schedule.
type cycleSchedule interface {
	Start(t time.Time) time.Time
	Next(t time.Time) time.Time
}

// errScheduleStuck reports a schedule that returned no usable cycle start.
// It is a bug in slotplan, not bad input: exit 1.
func errScheduleStuck(what string, t, got time.Time) error {
	return fmt.Errorf("the cycle schedule returned %s as the %s %s; this is a bug in riverslot's slotplan, please report it with this command line",
		got.UTC().Format(time.RFC3339), what, t.UTC().Format(time.RFC3339))
}

// cycleAround returns the start of the cycle holding at and the next start,
// checking that the schedule answered: start <= at < next.
func cycleAround(schedule cycleSchedule, at time.Time) (time.Time, time.Time, error) {
	start := schedule.Start(at)
	if start.IsZero() || start.After(at) {
		return time.Time{}, time.Time{}, errScheduleStuck("start of the cycle holding", at, start)
	}
	next := schedule.Next(at)
	if !next.After(at) {
		return time.Time{}, time.Time{}, errScheduleStuck("first cycle start after", at, next)
	}
	return start, next, nil
}

// nextSyncs returns the account's first n due times after at, one per cycle,
// in its hash slot shifted by shift. It always finishes (see nextSyncsIn).
func nextSyncs(ctx context.Context, schedule cycleSchedule, plan slotplan.Plan, seed uint64, shift int, id uuid.UUID, at time.Time, n int) ([]time.Time, error) {
	hash := plan.Shift(plan.SlotOf(id), shift)
	syncs, err := nextSyncsIn(ctx, schedule, plan, seed, id, at, n, func(time.Time) int { return hash })
	if err != nil {
		return nil, err
	}
	due := make([]time.Time, len(syncs))
	for i, s := range syncs {
		due[i] = s.due
	}
	return due, nil
}

// nextSyncsIn returns the account's first n syncs after at, one per cycle,
// in the slot slotIn gives for each cycle start: the slot's start plus the
// account's offset, as the per-slot job schedules it. It always finishes:
// it stops on ctx, fails if the schedule does not advance, and looks at no
// more than n+1 cycles (only the current cycle's due time can be at or
// before at).
func nextSyncsIn(ctx context.Context, schedule cycleSchedule, plan slotplan.Plan, seed uint64, id uuid.UUID, at time.Time, n int, slotIn func(cycleStart time.Time) int) ([]planSync, error) {
	start, _, err := cycleAround(schedule, at)
	if err != nil {
		return nil, err
	}
	off := plan.Offset(seed, id)
	syncs := make([]planSync, 0, n)
	for cycles := 0; len(syncs) < n; cycles++ {
		if ctx.Err() != nil {
			return nil, &exitError{code: 130, msg: "interrupted"}
		}
		if cycles > n {
			return nil, fmt.Errorf("found %d of %d sync times in %d cycles after %s; this is a bug in riverslot's slotplan, please report it with this command line",
				len(syncs), n, cycles, at.UTC().Format(time.RFC3339))
		}
		if due := plan.SlotStart(start, slotIn(start)).Add(off); due.After(at) {
			syncs = append(syncs, planSync{due: due, cycleStart: start})
		}
		next := schedule.Next(start)
		if !next.After(start) {
			return nil, errScheduleStuck("first cycle start after", start, next)
		}
		start = next
	}
	return syncs, nil
}

// cycleStarts returns the starts of the n cycles from the one holding at:
// those nextSyncsIn looks at, at most.
func cycleStarts(ctx context.Context, schedule cycleSchedule, at time.Time, n int) ([]time.Time, error) {
	start, _, err := cycleAround(schedule, at)
	if err != nil {
		return nil, err
	}
	starts := make([]time.Time, 0, n)
	for range n {
		if ctx.Err() != nil {
			return nil, &exitError{code: 130, msg: "interrupted"}
		}
		starts = append(starts, start)
		next := schedule.Next(start)
		if !next.After(start) {
			return nil, errScheduleStuck("first cycle start after", start, next)
		}
		start = next
	}
	return starts, nil
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

// clock formats a duration as H:MM:SS(.ffffff).
func clock(d time.Duration) string {
	h := d / time.Hour
	m := (d % time.Hour) / time.Minute
	s := (d % time.Minute) / time.Second
	out := fmt.Sprintf("%d:%02d:%02d", h, m, s)
	if us := (d % time.Second) / time.Microsecond; us != 0 {
		out += fmt.Sprintf(".%06d", us)
	}
	return out
}

// pinLookup is what the pins tables say about one account. A nil
// *pinLookup (pins not read) places the account by hash.
type pinLookup struct {
	cycleStart *time.Time // the latest pinned cycle; nil: none
	slot       *int32     // nil: not pinned in that cycle
	weight     *float64
	schema     string
	err        string // the pins tables do not exist
	// cycles holds, for each cycle plan looks at that has pins (by its
	// start's Unix nanoseconds), the account's pinned slot there, or -1
	// when it keeps its hash slot.
	cycles map[int64]int
}

// cyclePinsSQL returns the account's pin ($3) in each cycle of task $1 and
// plan $2 among $4 that has pins, in the pins tables of schema: (cycle
// start, slot), slot -1 when it is not pinned in that cycle. A cycle that
// fell back follows the pins it fell back to (none: hash placement).
func cyclePinsSQL(schema string) string {
	return "SELECT c.cycle_start, coalesce(p.slot, -1) FROM " + sqlbucket.QualifiedTable(schema, taskspec.PinCyclesTable) + " c LEFT JOIN " +
		sqlbucket.QualifiedTable(schema, taskspec.PinsTable) +
		" p ON p.task = c.task AND p.plan = c.plan AND p.cycle_start = coalesce(c.follows, c.cycle_start) AND p.account_id = $3" +
		" WHERE c.task = $1 AND c.plan = $2 AND c.cycle_start = ANY($4)"
}

// lookupPin reads the account's pin in the latest pinned cycle of task under
// planID, and in each cycle of starts that has pins.
func lookupPin(ctx context.Context, databaseURL, schema, task, planID string, id uuid.UUID, starts []time.Time) (*pinLookup, error) {
	pool, err := connect(ctx, databaseURL, 1)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	l := &pinLookup{schema: cmp.Or(schema, "search_path"), cycles: map[int64]int{}}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", sqlbucket.QualifiedTable(schema, taskspec.PinCyclesTable)).Scan(&exists); err != nil {
		return nil, fmt.Errorf("error looking up the pins tables: %w", err)
	}
	if !exists {
		l.err = "no pins tables in schema " + l.schema + " (the task is not weighted, or --pins-schema is not its Schema)"
		return l, nil
	}
	var start time.Time
	err = pool.QueryRow(ctx, taskspec.PinOfSQL(schema), task, planID, id).Scan(&start, &l.slot, &l.weight)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return l, nil
	case err != nil:
		return nil, fmt.Errorf("error reading the account's pin: %w", err)
	}
	l.cycleStart = &start
	rows, err := pool.Query(ctx, cyclePinsSQL(schema), task, planID, id, starts)
	if err != nil {
		return nil, fmt.Errorf("error reading the account's pins: %w", err)
	}
	var slot int
	if _, err := pgx.ForEachRow(rows, []any{&start, &slot}, func() error {
		l.cycles[start.UnixNano()] = slot
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error reading the account's pins: %w", err)
	}
	return l, nil
}

// check refuses a pin outside the plan's slots: the cycle's per-slot jobs
// would never select the account, and plan would print times that no job
// keeps.
func (l *pinLookup) check(plan slotplan.Plan, id uuid.UUID) error {
	if l == nil {
		return nil
	}
	bad := func(slot int, start time.Time) error {
		return fmt.Errorf("the pins table pins account %s to slot %d in the cycle of %s, outside the plan's %d slots: no per-slot job selects it there; this is a bug in riverslot, please report it",
			id, slot, start.UTC().Format(time.RFC3339), plan.Slots)
	}
	if l.pinned() && (*l.slot < 0 || int(*l.slot) >= plan.Slots) {
		return bad(int(*l.slot), *l.cycleStart)
	}
	for at, slot := range l.cycles {
		if slot < -1 || slot >= plan.Slots {
			return bad(slot, time.Unix(0, at))
		}
	}
	return nil
}

// pinned reports whether the account is pinned in the latest pinned cycle.
func (l *pinLookup) pinned() bool {
	return l != nil && l.err == "" && l.cycleStart != nil && l.slot != nil
}

// served is the slot a task serves the account in during one cycle, and
// why.
type served struct {
	slot int
	why  string
}

// servedSlot returns where task pt serves the account in the cycle starting
// at start, the pins being those of task base (pt itself, or the task pt is
// OppositeOf, whose pins pt follows shifted by the difference of their
// shifts): the cycle's own pin when its pins exist, else the pin of the
// latest pinned cycle (pins are sticky), else the hash slot.
func (l *pinLookup) servedSlot(plan slotplan.Plan, base, pt planTask, id uuid.UUID, start time.Time) served {
	hash := plan.Shift(plan.SlotOf(id), pt.shift)
	follow := func(pinned int) int { return plan.Shift(pinned, pt.shift-base.shift) }
	if l == nil || l.err != "" || l.cycleStart == nil {
		return served{hash, "hash slot"}
	}
	latest := l.cycleStart.UTC().Format(time.RFC3339)
	if slot, ok := l.cycles[start.UnixNano()]; ok {
		if slot < 0 {
			return served{hash, "hash slot: not pinned in that cycle"}
		}
		return served{follow(slot), "pinned in that cycle"}
	}
	if l.slot != nil {
		return served{follow(int(*l.slot)), "that cycle has no pins yet: the pin of " + latest + ", if it holds"}
	}
	return served{hash, "hash slot: that cycle has no pins yet, and it was not pinned in " + latest}
}

// describe is plan's "pinned" line.
func (l *pinLookup) describe(asked bool, plan slotplan.Plan, off time.Duration) string {
	switch {
	case !asked:
		return "unknown: a weighted task may pin it elsewhere; pass --database-url (and --pins-schema) to read the pins table"
	case l.err != "":
		return "no: " + l.err
	case l.cycleStart == nil:
		return "no: no cycle of this task and plan was pinned in schema " + l.schema + " (not weighted, or not bootstrapped yet)"
	case l.slot == nil:
		return "no: it keeps its hash slot in the latest pinned cycle, " + l.cycleStart.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("yes: to slot %d in the cycle of %s (weight %g), due +%s after that cycle's start: synced there, not in its hash slot",
		*l.slot, l.cycleStart.UTC().Format(time.RFC3339), *l.weight, clock(time.Duration(*l.slot)*plan.SlotDuration+off))
}

// describeOpposite is the "pinned" line of the --opposite task when the
// account is pinned for the first task: the opposite task follows that pin
// shifted by the difference of their shifts.
func (l *pinLookup) describeOpposite(plan slotplan.Plan, base, pt planTask, off time.Duration) string {
	slot := plan.Shift(int(*l.slot), pt.shift-base.shift)
	return fmt.Sprintf("yes: follows the pin of task %s to slot %d in the cycle of %s, shifted by %d: slot %d, due +%s after that cycle's start",
		base.name, *l.slot, l.cycleStart.UTC().Format(time.RFC3339), plan.Shift(pt.shift-base.shift, 0), slot,
		clock(time.Duration(slot)*plan.SlotDuration+off))
}

// planBudgets counts task's accounts per upstream (riverslot's
// UpstreamBudgets) in the database at url.
func planBudgets(ctx context.Context, url, riverSchema string, task riverslot.Task) ([]riverslot.UpstreamBudget, error) {
	if riverSchema != "" {
		if err := checkSchemaName("--river-schema", riverSchema); err != nil {
			return nil, err
		}
	}
	pool, err := connect(ctx, url, 2)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	task.Sync = func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tasks: []riverslot.Task{task}})
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if err := scheduler.Configure(&river.Config{Schema: riverSchema}); err != nil {
		return nil, usageErr("%v", err)
	}
	return scheduler.UpstreamBudgets(ctx, task.Name)
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
