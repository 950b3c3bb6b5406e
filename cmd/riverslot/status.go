package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
)

const statusAbout = `Shows where a task's cycle stands, read from riverslot's ledger (and
River's job table for what is still queued or running): each slot's
fan-out (scheduled, running, done, failed), how the sync jobs ended
(synced, gone, stale, no room upstream, failed, cancelled), lateness,
accounts expected against enqueued under the cycle's placement (hash, or the
pins its per-slot jobs follow), and one verdict: on track, behind by N
slots, failed slot K with River's error, or slot K selected N accounts, M
expected. --task and the database are enough: the latest cycle, its plan
(cycle length, seed, phase), placement and pins are read from the task's
jobs, so a phased task, a task OppositeOf another or a weighted task needs
no flag for it. --cycle and --trigger-offset matter only for a cycle that
has no job yet; --cycle-start shows an earlier cycle. Give --table and
--filter as the app configures them (accounts expected per slot).

For a task spread over several databases (docs/shards.md), give every
shard's as --shard NAME=URL (NAME@SCHEMA=URL when its River schema is not
--schema) instead of --database-url: status shows the latest cycle any
shard has made over all of them (the totals, each shard's verdict, slots,
syncs and lateness, and which shard serves each slot). A shard whose
database does not answer is shown as such; the others as usual.

For StartingGrace (30s) after River elects a leader (a restart), slots that
wait for their fan-out make the verdict "starting", not "behind".

Exit codes: 0 on track or starting, 1 behind or failed (with --shard: a
shard not on track or not answering, the shards' maps disagreeing, or no
shard with a cycle), 2 bad input.
`

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusAbout, stderr)
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "demo")
	tf := addTaskFlags(fs)
	schema, task := tf.schema, tf.task
	cycleStart := fs.String("cycle-start", "", "RFC 3339 start of the cycle to show (default: the latest cycle the ledger records)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the view")
	watch := fs.Duration("watch", 0, "redraw every interval until interrupted (e.g. 2s)")
	svg := fs.String("svg", "", "also draw the cycle (slots by state, accounts enqueued against expected, lateness) into this .svg file, rewritten on every --watch redraw")
	var shardSpecs shardFlag
	fs.Var(&shardSpecs, "shard", "NAME=URL (or NAME@SCHEMA=URL) of one shard's database, for a task spread over several (docs/shards.md): repeat it for every shard to see the task over all of them")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	accountsSchemaGiven := *tf.accountsSchema != ""
	if err := tf.check(); err != nil {
		return err
	}
	if *watch < 0 || (*watch > 0 && *watch < 100*time.Millisecond) {
		return usageErr("--watch must be at least 100ms, got %s", *watch)
	}
	if len(shardSpecs) > 0 {
		switch {
		case *svg != "":
			return usageErr("--svg draws one database's cycle: leave it out with --shard, or give one shard's --database-url instead")
		case *cycleStart != "":
			return usageErr("--cycle-start reads one database's cycle: leave it out with --shard (the latest cycle over all shards), or give one shard's --database-url instead")
		}
		parsed, err := parseShardSpecs(shardSpecs, *schema, "--schema must name River's schema in each shard's database, or give each shard's as --shard NAME@SCHEMA=URL")
		if err != nil {
			return err
		}
		return runStatusShards(ctx, tf, accountsSchemaGiven, parsed, *asJSON, *watch, stdout, stderr)
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
	if err := checkRiverSchema(ctx, pool, *schema); err != nil {
		return err
	}
	rt := tf.riverTask()
	rt.Sync = func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tasks: []riverslot.Task{rt}})
	if err != nil {
		return usageErr("%v", err)
	}
	if err := scheduler.Configure(&river.Config{Schema: *schema}); err != nil {
		return usageErr("%v", err)
	}

	for {
		var st *riverslot.TaskStatus
		if at.IsZero() {
			st, err = scheduler.Status(ctx, *task)
		} else {
			st, err = scheduler.StatusAt(ctx, *task, at)
		}
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{code: 130, msg: "interrupted"}
			}
			if !at.IsZero() && errors.Is(err, riverslot.ErrNoCycle) {
				return usageErr("--cycle-start: %v", err)
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
			if err := enc.Encode(st); err != nil {
				return err
			}
		} else {
			if *watch > 0 {
				fmt.Fprint(stdout, "\033[H\033[2J")
			}
			printStatus(stdout, st)
		}
		if *watch == 0 {
			if !st.Current.OnTrack && !st.Current.Starting {
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

// printStatus draws one bar per slot (enqueued against expected) and the
// verdict.
func printStatus(w io.Writer, st *riverslot.TaskStatus) {
	c := st.Current
	fmt.Fprintf(w, "task %s, cycle %s: %d slots, plan %s\n", st.Task, c.CycleStart.UTC().Format(time.RFC3339), c.Slots, c.Plan)
	pinned := c.Placement == riverslot.PlacementPinned
	if pinned {
		follows := "its own pins"
		if c.PinsTask != st.Task {
			follows = "the pins of task " + c.PinsTask
		}
		fmt.Fprintf(w, "placement: pinned (%s, shifted by %d slots): expected = hash slot - pinned out + pinned in\n", follows, c.PinsShift)
	}
	switch c.PinsFallback {
	case "previous":
		fmt.Fprintln(w, "pins: the bootstrap ran out of time computing this cycle's pins (PinsTimeout) and follows the latest pins computed before")
	case "hash":
		fmt.Fprintln(w, "pins: the bootstrap ran out of time computing this cycle's pins (PinsTimeout) and fell back to hash placement")
	}
	if cs := st.Census; cs != nil && cs.Stalls > 0 {
		fmt.Fprintf(w, "weight census of cycle %s: STALLED, %d attempts in a row took no step since %s (a lock on the accounts table, or a slow database); it backs off and retries\n",
			cs.CycleStart.Format(time.RFC3339), cs.Stalls, cs.StalledSince.Format(time.RFC3339))
	}
	if us := st.Upstreams; us != nil {
		fmt.Fprintf(w, "upstreams: %d, %d with a breaker open or half-open (all: riverslot upstream list)\n", us.Keys, us.NotClosed)
		for _, u := range us.Top {
			limit := "no rate limit"
			if u.RateLimit > 0 {
				limit = fmt.Sprintf("limit %g/s", u.RateLimit)
			}
			fmt.Fprintf(w, "  %q: breaker %s, %.1f/s now (%s), %d in flight, %d waiting; throttled %d, deferred %d, skipped %d, probes %d\n",
				u.Key, u.Breaker, u.RateNow, limit, u.InFlight, u.Waiting, u.Throttled, u.Deferred, u.Skipped, u.Probes)
		}
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
	fmt.Fprintf(w, "ended: %d synced, %d accounts gone, %d stale, %d without room with their upstream (counted in the ledger)\n",
		c.Synced, c.Gone, c.SkippedStale, c.SkippedUpstream)
	fmt.Fprintf(w, "accounts expected %d; lateness %s\n", c.AccountsExpected, latenessText(c))
	if c.NextSlot >= 0 {
		fmt.Fprintf(w, "next slot %d at %s\n", c.NextSlot, c.NextSlotAt.UTC().Format(time.RFC3339))
	}
	if c.AccountsError != "" {
		fmt.Fprintf(w, "note: %s\n", c.AccountsError)
	}
	fmt.Fprintf(w, "verdict: %s\n", c.Verdict)
}

// latenessText prints a cycle's lateness percentiles, or says they are
// unknown (no synced sync counted yet).
func latenessText(c *riverslot.CycleStatus) string {
	if !c.LatenessKnown {
		return "unknown (no synced sync counted yet)"
	}
	return fmt.Sprintf("p50 %.2fs p99 %.2fs (%d synced)", c.LatenessP50.Seconds(), c.LatenessP99.Seconds(), c.LatenessSample)
}
