package plancmd

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/upstreamcmd"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// Config is what riverslot plan prints: the values of its flags, which the
// command validates as it parses them, and the pool it connected.
type Config struct {
	// Plan is the cycle's slots (--cycle, --buckets) and Schedule its
	// cycle starts (--anchor, --tz).
	Plan     slotplan.Plan
	Schedule slotplan.Schedule
	// Anchor is --anchor as given (HH:MM[:SS]), printed.
	Anchor string
	// Location is the time zone of the anchor (--tz). Defaults to an
	// absolute UTC grid from the Unix epoch.
	Location *time.Location
	// Now is the time the current cycle and the next syncs are computed
	// from.
	Now time.Time
	// Account is the account whose bucket, slot and next syncs to print
	// (--account). Defaults to none: the slots only.
	Account *uuid.UUID
	// Tasks are the task (--task) and, with --opposite, the task opposite
	// it. At least one.
	Tasks []Task
	// ShardMap is the task's shard map (--shard-ranges): with Account, the
	// account's shard is printed. Defaults to none.
	ShardMap *slotplan.ShardMap
	// SVG is a file to draw the slot circle into (--svg). Defaults to none.
	SVG string

	// Pool is the database of --database-url. Defaults to none: the pins
	// are not read, and plan says it cannot know.
	Pool *pgxpool.Pool
	// PinsSchema is the schema of the pins tables (--pins-schema).
	// Defaults to search_path.
	PinsSchema string
	// Upstreams is riverslot upstream check's config for the task's
	// upstreams (--upstreams, --upstream-rate, --upstream-concurrency,
	// --upstream-latency, --river-schema): Run counts the task's accounts
	// per upstream and weighs each against min(Rate, Concurrency /
	// latency), operators' overrides winning, as upstream check does
	// (upstreamcmd.Check). Its Pool is Pool. Defaults to none.
	Upstreams *upstreamcmd.CheckConfig
}

// Run prints the cycle's slots and, with Config.Account, the account's
// times, to w. Everything is computed before anything is printed, so a
// schedule that cannot answer fails without half a report. An upstream that
// cannot fit in a cycle is an error, returned after the whole report; a task
// the library refuses is an *inspect.InputError; ErrInterrupted when ctx is
// done.
func Run(ctx context.Context, c *Config, w io.Writer) error {
	plan, tasks, id := c.Plan, c.Tasks, uuid.Nil
	if c.Account != nil {
		id = *c.Account
	}
	current, next, err := cycleAround(c.Schedule, c.Now)
	if err != nil {
		return err
	}
	if c.SVG != "" {
		if err := writeSVG(c.SVG, plan, tasks, c.Account); err != nil {
			return fmt.Errorf("error writing --svg %s: %w", c.SVG, err)
		}
	}
	var pin *pinLookup
	if c.Account != nil && c.Pool != nil {
		starts, err := cycleStarts(ctx, c.Schedule, c.Now, syncsShown+1)
		if err != nil {
			return err
		}
		if pin, err = lookupPin(ctx, c.Pool, c.PinsSchema, tasks[0].Name, taskspec.PlanID(plan, tasks[0].Seed, tasks[0].Shift), id, starts); err != nil {
			return err
		}
		if err := pin.check(plan, id); err != nil {
			return err
		}
	}
	if c.Account != nil {
		for i := range tasks {
			pt := &tasks[i]
			slotIn := func(start time.Time) int { return pin.servedSlot(plan, tasks[0], *pt, id, start).slot }
			if pt.syncs, err = nextSyncsIn(ctx, c.Schedule, plan, pt.Seed, id, c.Now, syncsShown, slotIn); err != nil {
				return err
			}
		}
	}

	var (
		budgets   []upstreamcmd.Budget
		budgetErr error
	)
	if c.Upstreams != nil {
		if budgets, err = upstreamcmd.Check(ctx, c.Upstreams); err != nil {
			return err
		}
	}

	cycle := plan.Cycle
	where := "UTC grid from the Unix epoch"
	if c.Location != nil {
		where = "wall clock in " + c.Location.String()
	}
	fmt.Fprintf(w, "cycle          %s (%d s)\n", cycle, int64(cycle/time.Second))
	if plan.Buckets == slotplan.BucketsTwoByte {
		fmt.Fprintf(w, "slots          %d = gcd(%d ms, 65536)\n", plan.Slots, int64(cycle/time.Millisecond))
		fmt.Fprintf(w, "slot duration  %s\n", plan.SlotDuration)
		fmt.Fprintf(w, "buckets/slot   %d of 65536 (bucket = byte 15 x 256 + byte 14 of the UUID)\n", plan.BucketsPerSlot)
	} else {
		fmt.Fprintf(w, "slots          %d = gcd(%d, 256)\n", plan.Slots, int64(cycle/time.Second))
		fmt.Fprintf(w, "slot duration  %s\n", plan.SlotDuration)
		fmt.Fprintf(w, "buckets/slot   %d (bucket = last byte of the UUID)\n", plan.BucketsPerSlot)
	}
	fmt.Fprintf(w, "cycle starts   %s + k*%s, %s\n", c.Anchor, cycle, where)
	fmt.Fprintf(w, "current cycle  %s\n", current.Format(time.RFC3339))
	fmt.Fprintf(w, "next cycle     %s\n\n", next.Format(time.RFC3339))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "slot\tstarts after cycle start\tends\tbuckets")
	for slot := range plan.Slots {
		lo, hi := plan.BucketRange(slot)
		start := time.Duration(slot) * plan.SlotDuration
		if plan.Buckets == slotplan.BucketsTwoByte {
			fmt.Fprintf(tw, "%d\t+%s\t+%s\t%d-%d (0x%04x-0x%04x)\n", slot, Clock(start), Clock(start+plan.SlotDuration), lo, hi, lo, hi)
		} else {
			fmt.Fprintf(tw, "%d\t+%s\t+%s\t%d-%d (0x%02x-0x%02x)\n", slot, Clock(start), Clock(start+plan.SlotDuration), lo, hi, lo, hi)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if c.Upstreams != nil {
		fmt.Fprintf(w, "\nupstreams (%s) of task %s against their limits, min(rate, concurrency / latency):\n", c.Upstreams.Task.Upstream, c.Upstreams.Task.Name)
		// An upstream that cannot fit is an error, after the account's times.
		budgetErr = upstreamcmd.WriteCheck(w, budgets, false)
	}
	if c.Account == nil {
		return budgetErr
	}
	fmt.Fprintf(w, "\naccount        %s\n", id)
	if plan.Buckets == slotplan.BucketsTwoByte {
		fmt.Fprintf(w, "bucket         %d (0x%04x: byte 15 0x%02x, byte 14 0x%02x)\n", plan.BucketOf(id), plan.BucketOf(id), id[15], id[14])
	} else {
		fmt.Fprintf(w, "bucket         %d (0x%02x)\n", id[15], id[15])
	}
	if m := c.ShardMap; m != nil {
		b := slotplan.BucketOf(id, slotplan.BucketsTwoByte)
		owner := m.SlotOwner(plan, tasks[0].Shift, plan.Shift(plan.SlotOf(id), tasks[0].Shift))
		fmt.Fprintf(w, "shard          %s (two-byte bucket %d; its slot is served by %s)\n", m.Owner(b), b, owner)
	}
	asked := c.Pool != nil
	for i, pt := range tasks {
		slot := plan.Shift(plan.SlotOf(id), pt.Shift)
		off := plan.Offset(pt.Seed, id)
		if len(tasks) > 1 || pt.Shift != 0 {
			fmt.Fprintf(w, "task           %s (slots shifted by %d)\n", pt.Name, pt.Shift)
		}
		if pin.pinned() {
			fmt.Fprintf(w, "slot           %d of %d (slots numbered from 0): its hash slot, but it is pinned\n", slot, plan.Slots)
		} else {
			fmt.Fprintf(w, "slot           %d of %d (slots numbered from 0)\n", slot, plan.Slots)
		}
		due := slot
		if i == 0 {
			fmt.Fprintf(w, "pinned         %s\n", pin.describe(asked, plan, off))
		} else if pin.pinned() {
			fmt.Fprintf(w, "pinned         %s\n", pin.describeOpposite(plan, tasks[0], pt, off))
		}
		if pin.pinned() {
			due = plan.Shift(int(*pin.slot), pt.Shift-tasks[0].Shift)
			fmt.Fprintf(w, "pinned slot    %d: +%s to +%s after each cycle start, while the pin of %s holds\n",
				due, Clock(time.Duration(due)*plan.SlotDuration), Clock(time.Duration(due+1)*plan.SlotDuration), pin.cycleStart.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(w, "offset         %s into the slot (seed %d)\n", off, pt.Seed)
		fmt.Fprintf(w, "due            +%s after each cycle start\n", Clock(time.Duration(due)*plan.SlotDuration+off))
		fmt.Fprintln(w, "next syncs (due time; River starts it within a few seconds):")
		for _, sync := range pt.syncs {
			fmt.Fprintf(w, "  %s\n", sync.due.Format(time.RFC3339Nano))
			if asked && pin.err == "" {
				where := pin.servedSlot(plan, tasks[0], pt, id, sync.cycleStart)
				start := plan.SlotStart(sync.cycleStart, where.slot)
				fmt.Fprintf(w, "    slot %d, %s to %s: %s\n", where.slot, start.Format(time.RFC3339Nano),
					start.Add(plan.SlotDuration).Format(time.RFC3339Nano), where.why)
			}
		}
	}
	return budgetErr
}
