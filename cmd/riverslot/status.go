package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/riverutil"
)

const statusAbout = `Shows where a task's cycle stands, read from River's job table: each
slot's fan-out (scheduled, running, done, failed), the sync jobs by state
(and those completed without calling Sync: stale, too soon), lateness,
accounts expected against enqueued under the cycle's placement (hash, or the
pins its per-slot jobs follow), and one verdict: on track, behind by N
slots, failed slot K with River's error, or slot K selected N accounts, M
expected. Give the task as the app configures it (--cycle, --trigger-offset,
--table, --filter, ...); the cycle is found under the plan its jobs carry, so
a task OppositeOf another needs no flag for it, nor a weighted task --weight.

Exit codes: 0 on track, 1 behind or failed, 2 bad input.
`

// statusJSON is the --json output.
type statusJSON struct {
	Task               string           `json:"task"`
	CycleStart         string           `json:"cycle_start"`
	Plan               string           `json:"plan"`
	Placement          string           `json:"placement"`
	PinsTask           string           `json:"pins_task,omitempty"`
	PinsShift          int              `json:"pins_shift,omitempty"`
	Slots              int              `json:"slots"`
	SlotsDone          int              `json:"slots_done"`
	SlotsFailed        int              `json:"slots_failed"`
	AccountsExpected   int64            `json:"accounts_expected"`
	SyncEnqueued       int64            `json:"sync_enqueued"`
	SyncSkipped        int64            `json:"sync_skipped"`
	SyncPending        int64            `json:"sync_pending"`
	SyncRunning        int64            `json:"sync_running"`
	SyncRetryable      int64            `json:"sync_retryable"`
	SyncCompleted      int64            `json:"sync_completed"`
	SyncFailed         int64            `json:"sync_failed"`
	SyncCancelled      int64            `json:"sync_cancelled"`
	SyncSkippedStale   int64            `json:"sync_skipped_stale"`
	SyncSkippedTooSoon int64            `json:"sync_skipped_too_soon"`
	LatenessP50Seconds float64          `json:"lateness_p50_seconds"`
	LatenessP99Seconds float64          `json:"lateness_p99_seconds"`
	NextSlot           *int             `json:"next_slot"`
	NextSlotAt         *string          `json:"next_slot_at"`
	Verdict            string           `json:"verdict"`
	OnTrack            bool             `json:"on_track"`
	OffSlots           int              `json:"off_slots"`
	PerSlot            []statusSlotJSON `json:"per_slot"`
}

type statusSlotJSON struct {
	Slot      int    `json:"slot"`
	Start     string `json:"start"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	Expected  int64  `json:"accounts_expected"`
	PinnedIn  int64  `json:"pinned_in"`
	PinnedOut int64  `json:"pinned_out"`
	Enqueued  int64  `json:"enqueued"`
	Skipped   int64  `json:"skipped"`
	Batches   int    `json:"batches"`
	Error     string `json:"error,omitempty"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusAbout, stderr)
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "demo")
	tf := addTaskFlags(fs)
	schema, task, cycle, offset := tf.schema, tf.task, tf.cycle, tf.offset
	cycleStart := fs.String("cycle-start", "", "RFC 3339 start of the cycle to show (default: the latest cycle with a bootstrap job)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the view")
	watch := fs.Duration("watch", 0, "redraw every interval until interrupted (e.g. 2s)")
	svg := fs.String("svg", "", "also draw the cycle (slots by state, accounts enqueued against expected, lateness) into this .svg file, rewritten on every --watch redraw")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := tf.check(); err != nil {
		return err
	}
	if *watch < 0 || (*watch > 0 && *watch < 100*time.Millisecond) {
		return usageErr("--watch must be at least 100ms, got %s", *watch)
	}
	if *svg != "" {
		if err := checkSVGPath(*svg); err != nil {
			return err
		}
	}
	var at time.Time
	if *cycleStart != "" {
		t, err := time.Parse(time.RFC3339, *cycleStart)
		if err != nil {
			return usageErr("--cycle-start must be RFC 3339, e.g. 2026-11-22T10:00:00Z, got %q", *cycleStart)
		}
		at = t
	}
	// status only reads, so checking the task after connecting changes
	// nothing.
	pool, err := connect(ctx, databaseURL(), 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	rt := tf.riverTask()
	rt.Sync = func(context.Context, uuid.UUID, *river.Job[riverutil.SyncArgs]) error { return nil }
	scheduler, err := riverutil.New(pool, &riverutil.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tasks: []riverutil.Task{rt}})
	if err != nil {
		return usageErr("%v", err)
	}
	if err := scheduler.Configure(&river.Config{Schema: *schema}); err != nil {
		return usageErr("%v", err)
	}
	if !at.IsZero() {
		info, err := scheduler.Task(*task)
		if err != nil {
			return err
		}
		if start := info.Schedule.Start(at); !start.Equal(at) {
			return usageErr("--cycle-start %s is not a cycle start of the task (--cycle %s, --trigger-offset %s); the cycle containing it starts at %s",
				*cycleStart, *cycle, *offset, start.UTC().Format(time.RFC3339))
		}
	}

	for {
		var st *riverutil.TaskStatus
		if at.IsZero() {
			st, err = scheduler.Status(ctx, *task)
		} else {
			st, err = scheduler.StatusAt(ctx, *task, at)
		}
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{code: 130, msg: "interrupted"}
			}
			return err
		}
		if *svg != "" {
			if err := writeStatusSVG(*svg, st); err != nil {
				return fmt.Errorf("error writing --svg %s: %w", *svg, err)
			}
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(statusToJSON(st)); err != nil {
				return err
			}
		} else {
			if *watch > 0 {
				fmt.Fprint(stdout, "\033[H\033[2J")
			}
			printStatus(stdout, st)
		}
		if *watch == 0 {
			if !st.Current.OnTrack {
				return &exitError{code: 1}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return &exitError{code: 130, msg: "interrupted"}
		case <-time.After(*watch):
		}
	}
}

func statusToJSON(st *riverutil.TaskStatus) *statusJSON {
	c := st.Current
	out := &statusJSON{
		Task: st.Task, CycleStart: c.CycleStart.UTC().Format(time.RFC3339), Plan: c.Plan, Placement: c.Placement,
		PinsTask: c.PinsTask, PinsShift: c.PinsShift, Slots: c.Slots,
		SlotsDone: c.SlotsDone, SlotsFailed: c.SlotsFailed, AccountsExpected: c.AccountsExpected,
		SyncEnqueued: c.Enqueued, SyncSkipped: c.Skipped, SyncPending: c.Pending, SyncRunning: c.Running,
		SyncRetryable: c.Retryable, SyncCompleted: c.Completed, SyncFailed: c.Discarded, SyncCancelled: c.Cancelled,
		SyncSkippedStale: c.SkippedStale, SyncSkippedTooSoon: c.SkippedTooSoon,
		LatenessP50Seconds: c.LatenessP50.Seconds(), LatenessP99Seconds: c.LatenessP99.Seconds(),
		Verdict: c.Verdict, OnTrack: c.OnTrack, OffSlots: c.OffSlots,
	}
	if c.NextSlot >= 0 {
		next, at := c.NextSlot, c.NextSlotAt.UTC().Format(time.RFC3339)
		out.NextSlot, out.NextSlotAt = &next, &at
	}
	for _, p := range c.PerSlot {
		out.PerSlot = append(out.PerSlot, statusSlotJSON{
			Slot: p.Slot, Start: p.Start.UTC().Format(time.RFC3339), State: p.State, Attempts: p.Attempts,
			Expected: p.Expected, PinnedIn: p.PinnedIn, PinnedOut: p.PinnedOut, Enqueued: p.Enqueued, Skipped: p.Skipped, Batches: p.Batches, Error: p.Error,
		})
	}
	return out
}

// printStatus draws one bar per slot (enqueued against expected) and the
// verdict.
func printStatus(w io.Writer, st *riverutil.TaskStatus) {
	c := st.Current
	fmt.Fprintf(w, "task %s, cycle %s: %d slots, plan %s\n", st.Task, c.CycleStart.UTC().Format(time.RFC3339), c.Slots, c.Plan)
	pinned := c.Placement == riverutil.PlacementPinned
	if pinned {
		follows := "its own pins"
		if c.PinsTask != st.Task {
			follows = "the pins of task " + c.PinsTask
		}
		fmt.Fprintf(w, "placement: pinned (%s, shifted by %d slots): expected = hash slot - pinned out + pinned in\n", follows, c.PinsShift)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "slot\tstarts\tstate\tenqueued/expected\t"
	if pinned {
		header += "pinned out/in\t"
	}
	fmt.Fprintln(tw, header)
	for _, p := range c.PerSlot {
		const width = 20
		fill := 0
		if p.Expected > 0 {
			fill = int(min(p.Enqueued*width/p.Expected, width))
		}
		line := fmt.Sprintf("%d\t%s\t%s\t[%s%s] %d/%d", p.Slot, p.Start.UTC().Format("15:04:05"), p.State,
			strings.Repeat("#", fill), strings.Repeat(".", width-fill), p.Enqueued, p.Expected)
		if pinned {
			line += fmt.Sprintf("\t-%d/+%d", p.PinnedOut, p.PinnedIn)
		}
		if p.Error != "" {
			line += "  " + oneLine(p.Error)
		}
		fmt.Fprintln(tw, line+"\t")
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "sync jobs: %d enqueued (%d late skipped), %d pending, %d running, %d retryable, %d completed, %d failed, %d cancelled\n",
		c.Enqueued, c.Skipped, c.Pending, c.Running, c.Retryable, c.Completed, c.Discarded, c.Cancelled)
	fmt.Fprintf(w, "completed without calling Sync: %s stale, %s too soon\n", skippedCount(c.SkippedStale), skippedCount(c.SkippedTooSoon))
	fmt.Fprintf(w, "accounts expected %d; lateness p50 %.2fs p99 %.2fs (last %d completed)\n",
		c.AccountsExpected, c.LatenessP50.Seconds(), c.LatenessP99.Seconds(), c.LatenessSample)
	if c.NextSlot >= 0 {
		fmt.Fprintf(w, "next slot %d at %s\n", c.NextSlot, c.NextSlotAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "verdict: %s\n", c.Verdict)
}

// skippedCount prints a count of skipped sync jobs, which Status counts up
// to riverutil.SkippedCountMax.
func skippedCount(n int64) string {
	if n >= riverutil.SkippedCountMax {
		return fmt.Sprintf("%d+", n)
	}
	return fmt.Sprint(n)
}
