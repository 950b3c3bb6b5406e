package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

const planAbout = `Prints a cycle's slots and, with --account, the account's bucket, slot,
offset and next three sync times. It needs no database; with --database-url
it also reads whether a weighted task (Task.Weight) pinned the account to
another slot in its latest cycle.
`

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", planAbout, stderr)
	cycle := fs.Duration("cycle", 24*time.Hour, "cycle length: a whole number of seconds, a multiple of 2s (24h, 8h, 120s)")
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
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	// Every flag is checked before anything is printed.
	plan, err := slotplan.New(*cycle)
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
	at := time.Now()
	if *now != "" {
		if at, err = time.Parse(time.RFC3339, *now); err != nil {
			return usageErr("--now must be RFC 3339, e.g. 2026-11-22T09:00:00Z: %v", err)
		}
	}
	var id uuid.UUID
	if *account != "" {
		if id, err = uuid.Parse(*account); err != nil {
			return usageErr("--account must be a UUID such as 0b6e4f2a-8c1d-4f5e-9a7b-3c2d1e0f9a8b, got %q", *account)
		}
	}
	s := *seed
	if s == 0 {
		if err := checkTaskName(*task); err != nil {
			return err
		}
		s = slotplan.SeedFromName(*task)
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
	if *account != "" {
		for i := range tasks {
			if tasks[i].syncs, err = nextSyncs(ctx, schedule, plan, tasks[i].seed, tasks[i].shift, id, at, 3); err != nil {
				return err
			}
		}
	}

	var pin *pinLookup
	if *account != "" && *databaseURL != "" {
		if pin, err = lookupPin(ctx, *databaseURL, *pinsSchema, tasks[0].name, taskspec.PlanID(plan, s, shift), id); err != nil {
			return err
		}
	}

	where := "UTC grid from the Unix epoch"
	if loc != nil {
		where = "wall clock in " + loc.String()
	}
	fmt.Fprintf(stdout, "cycle          %s (%d s)\n", *cycle, int64(*cycle/time.Second))
	fmt.Fprintf(stdout, "slots          %d = gcd(%d, 256)\n", plan.Slots, int64(*cycle/time.Second))
	fmt.Fprintf(stdout, "slot duration  %s\n", plan.SlotDuration)
	fmt.Fprintf(stdout, "buckets/slot   %d (bucket = last byte of the UUID)\n", plan.BucketsPerSlot)
	fmt.Fprintf(stdout, "cycle starts   %s + k*%s, %s\n", *anchor, *cycle, where)
	fmt.Fprintf(stdout, "current cycle  %s\n", current.Format(time.RFC3339))
	fmt.Fprintf(stdout, "next cycle     %s\n\n", next.Format(time.RFC3339))

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "slot\tstarts after cycle start\tends\tbuckets")
	for slot := range plan.Slots {
		lo, hi := plan.BucketRange(slot)
		start := time.Duration(slot) * plan.SlotDuration
		fmt.Fprintf(tw, "%d\t+%s\t+%s\t%d-%d (0x%02x-0x%02x)\n", slot, clock(start), clock(start+plan.SlotDuration), lo, hi, lo, hi)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if *account == "" {
		return nil
	}
	fmt.Fprintf(stdout, "\naccount        %s\n", id)
	fmt.Fprintf(stdout, "bucket         %d (0x%02x)\n", id[15], id[15])
	for _, pt := range tasks {
		slot := plan.Shift(plan.SlotOf(id), pt.shift)
		off := plan.Offset(pt.seed, id)
		if len(tasks) > 1 || pt.shift != 0 {
			fmt.Fprintf(stdout, "task           %s (slots shifted by %d)\n", pt.name, pt.shift)
		}
		fmt.Fprintf(stdout, "slot           %d of %d (slots numbered from 0)\n", slot, plan.Slots)
		if pt.name == tasks[0].name {
			fmt.Fprintf(stdout, "pinned         %s\n", pin.describe(*databaseURL != "", plan, off))
		}
		fmt.Fprintf(stdout, "offset         %s into the slot (seed %d)\n", off, pt.seed)
		fmt.Fprintf(stdout, "due            +%s after each cycle start\n", clock(time.Duration(slot)*plan.SlotDuration+off))
		fmt.Fprintln(stdout, "next syncs (due time; River starts it within a few seconds):")
		for _, due := range pt.syncs {
			fmt.Fprintf(stdout, "  %s\n", due.Format(time.RFC3339Nano))
		}
	}
	return nil
}

// planTask is one task plan prints an account's times for.
type planTask struct {
	name  string
	seed  uint64
	shift int
	syncs []time.Time
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

// nextSyncs returns the account's first n due times after at, one per cycle.
// It always finishes: it stops on ctx, fails if the schedule does not
// advance, and looks at no more than n+1 cycles (only the current cycle's due
// time can be at or before at).
func nextSyncs(ctx context.Context, schedule cycleSchedule, plan slotplan.Plan, seed uint64, shift int, id uuid.UUID, at time.Time, n int) ([]time.Time, error) {
	start, _, err := cycleAround(schedule, at)
	if err != nil {
		return nil, err
	}
	syncs := make([]time.Time, 0, n)
	for cycles := 0; len(syncs) < n; cycles++ {
		if ctx.Err() != nil {
			return nil, &exitError{code: 130, msg: "interrupted"}
		}
		if cycles > n {
			return nil, fmt.Errorf("found %d of %d sync times in %d cycles after %s; this is a bug in riverslot's slotplan, please report it with this command line",
				len(syncs), n, cycles, at.UTC().Format(time.RFC3339))
		}
		if due := plan.ShiftedTarget(start, seed, id, shift); due.After(at) {
			syncs = append(syncs, due)
		}
		next := schedule.Next(start)
		if !next.After(start) {
			return nil, errScheduleStuck("first cycle start after", start, next)
		}
		start = next
	}
	return syncs, nil
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

// pinLookup is what the pins tables say about one account.
type pinLookup struct {
	cycleStart *time.Time // the latest pinned cycle; nil: none
	slot       *int32     // nil: not pinned in that cycle
	weight     *float64
	schema     string
	err        string // the pins tables do not exist
}

// lookupPin reads the account's pin in the latest pinned cycle of task under
// planID.
func lookupPin(ctx context.Context, databaseURL, schema, task, planID string, id uuid.UUID) (*pinLookup, error) {
	pool, err := connect(ctx, databaseURL, 1)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	l := &pinLookup{schema: cmp.Or(schema, "search_path")}
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
	return l, nil
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
	return fmt.Sprintf("yes: to slot %d in the cycle of %s (weight %g), due +%s after that cycle's start",
		*l.slot, l.cycleStart.UTC().Format(time.RFC3339), *l.weight, clock(time.Duration(*l.slot)*plan.SlotDuration+off))
}
