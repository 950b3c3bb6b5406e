package inspect

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/riverslot/riverslot"
)

// ShardsTimeout bounds one reading of every shard: one that has not
// answered in its first half is shown as not answering.
const ShardsTimeout = 20 * time.Second

// ShardsFine reports whether every shard answered and is on track or starting, and
// every slot has one shard.
func ShardsFine(st *riverslot.ShardsStatus) bool { return st.OnTrack || st.Starting }

// WriteShardsStatus prints the fleet's cycle: one line per shard, the
// totals, the shard serving each slot, and the verdict.
func WriteShardsStatus(w io.Writer, st *riverslot.ShardsStatus) {
	fmt.Fprintf(w, "task %s, cycle %s over %d shards: %d slots served by the shards that answered\n",
		st.Task, st.CycleStart.UTC().Format(time.RFC3339), len(st.Shards), st.Slots)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tMAP\tSLOTS\tDONE\tFAILED\tBEHIND\tEXPECTED\tENQUEUED\tSYNCED\tSKIPPED\tPENDING\tRUNNING\tLATENESS\tVERDICT")
	for _, sc := range st.Shards {
		c := sc.Status
		if c == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", sc.Shard, OneLine(sc.Error))
			continue
		}
		lateness := "unknown"
		if c.LatenessKnown {
			lateness = fmt.Sprintf("p50 %.2fs p99 %.2fs", c.LatenessP50.Seconds(), c.LatenessP99.Seconds())
		}
		fmt.Fprintf(tw, "%s\tv%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", sc.Shard, c.ShardVersion, c.Slots-c.SlotsElsewhere,
			c.SlotsDone, c.SlotsFailed, c.BehindSlots, c.AccountsExpected, c.Enqueued, c.Synced, c.Gone+c.SkippedStale+c.SkippedUpstream,
			c.Pending, c.Running, lateness, OneLine(c.Verdict))
	}
	fmt.Fprintf(tw, "all\t\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\t\n", st.Slots, st.SlotsDone, st.SlotsFailed, st.BehindSlots,
		st.AccountsExpected, st.Enqueued, st.Synced, st.Gone+st.SkippedStale+st.SkippedUpstream, st.Pending, st.Running)
	_ = tw.Flush()
	fmt.Fprintf(w, "slots by shard: %s\n", slotRuns(st))
	fmt.Fprintf(w, "verdict: %s\n", st.Verdict)
}

// slotRuns names the shard serving each run of slots ("0-1 a, 2-4 b"),
// "?" where no answering shard serves it, "a+b" where several do.
func slotRuns(st *riverslot.ShardsStatus) string {
	owners := st.SlotShards()
	for i, o := range owners {
		if o == "" {
			owners[i] = "?"
		}
	}
	var runs []string
	for lo := 0; lo < len(owners); {
		hi := lo
		for hi+1 < len(owners) && owners[hi+1] == owners[lo] {
			hi++
		}
		if hi == lo {
			runs = append(runs, fmt.Sprintf("%d %s", lo, owners[lo]))
		} else {
			runs = append(runs, fmt.Sprintf("%d-%d %s", lo, hi, owners[lo]))
		}
		lo = hi + 1
	}
	return strings.Join(runs, ", ")
}
