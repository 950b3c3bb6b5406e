package inspect

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/riverslot/riverslot"
)

// WriteStatus draws one bar per slot (enqueued against expected) and the
// verdict of the current cycle, naming the cycle prepared ahead beside it.
func WriteStatus(w io.Writer, st *riverslot.TaskStatus) {
	c := st.Current
	fmt.Fprintf(w, "task %s, cycle %s: %d slots, plan %s\n", st.Task, c.CycleStart.UTC().Format(time.RFC3339), c.Slots, c.Plan)
	if p := st.Prepared; p != nil {
		fmt.Fprintf(w, "prepared ahead: cycle %s, %d slots, plan %s (bootstrapped, not started; what follows is the cycle running now)\n",
			p.CycleStart.UTC().Format(time.RFC3339), p.Slots, p.Plan)
	}
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
		writeUpstreams(w, us, time.Now())
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
			line += "  " + OneLine(p.Error)
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

// writeUpstreams prints a task's upstreams, each with the limits in force
// and, while an upstream's pause (a 429) lasts at now, when it ends.
func writeUpstreams(w io.Writer, us *riverslot.UpstreamsStatus, now time.Time) {
	fmt.Fprintf(w, "upstreams: %d, %d with a breaker open or half-open (all: riverslot upstream list)\n", us.Keys, us.NotClosed)
	if us.TaskLimitsUnknown {
		fmt.Fprintln(w, "  limits without an override are the task's default (the app's Task.Limits, not known here); riverslot upstream set overrides one")
	}
	for _, u := range us.Top {
		rate, concurrency := "task default", "task default"
		if u.Rate != nil || !us.TaskLimitsUnknown {
			rate = "none"
			if u.RateLimit > 0 {
				rate = fmt.Sprintf("%g/s", u.RateLimit)
			}
		}
		if u.Concurrency != nil || !us.TaskLimitsUnknown {
			concurrency = "none"
			if u.ConcurrencyLimit > 0 {
				concurrency = strconv.Itoa(u.ConcurrencyLimit)
			}
		}
		line := fmt.Sprintf("  %q: breaker %s, %.1f/s now (rate limit %s), %d in flight (concurrency limit %s), %d waiting; throttled %d, deferred %d, skipped %d, probes %d",
			u.Key, u.Breaker, u.RateNow, rate, u.InFlight, concurrency, u.Waiting, u.Throttled, u.Deferred, u.Skipped, u.Probes)
		if u.PausedUntil != nil && u.PausedUntil.After(now) {
			line += fmt.Sprintf("; paused (429) until %s", u.PausedUntil.UTC().Format(time.RFC3339))
		}
		fmt.Fprintln(w, line)
	}
}

// latenessText prints a cycle's lateness percentiles, or says they are
// unknown (no synced sync counted yet).
func latenessText(c *riverslot.CycleStatus) string {
	if !c.LatenessKnown {
		return "unknown (no synced sync counted yet)"
	}
	return fmt.Sprintf("p50 %.2fs p99 %.2fs (%d synced)", c.LatenessP50.Seconds(), c.LatenessP99.Seconds(), c.LatenessSample)
}

// OneLine folds s onto one line, its runs of white space made one space.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
