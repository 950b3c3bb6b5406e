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

// statusShardsTimeout bounds one reading of every shard: one that has not
// answered in its first half is shown as not answering.
const statusShardsTimeout = 20 * time.Second

// runStatusShards is riverslot status --shard: the task's latest cycle
// over all its shards (riverslot.StatusShards).
func runStatusShards(ctx context.Context, tf *taskFlags, accountsSchemaGiven bool, specs []shardSpec, asJSON bool, watch time.Duration, stdout, stderr io.Writer) error {
	schedulers := make([]*riverslot.Scheduler, 0, len(specs))
	for _, sp := range specs {
		pool, down, err := openShard(ctx, sp, 4, true)
		if err != nil {
			return err
		}
		defer pool.Close()
		if down == nil {
			if err := checkRiverSchema(ctx, pool, sp.schema); err != nil {
				var ee *exitError
				if errors.As(err, &ee) {
					return shardErr(sp.name, err) // a wrong NAME@SCHEMA is bad input, not an outage
				}
				down = fmt.Errorf("shard %q: %w", sp.name, err)
			}
		}
		if down != nil {
			fmt.Fprintf(stderr, "warning: %v; shown as not answering\n", down)
		}
		rt := tf.riverTask()
		if !accountsSchemaGiven {
			rt.Schema = sp.schema // the shard's accounts beside its River tables
		}
		rt.Sync = func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
		s, err := riverslot.New(pool, &riverslot.Config{Shard: sp.name, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tasks: []riverslot.Task{rt}})
		if err != nil {
			return usageErr("%v", err)
		}
		if err := s.Configure(&river.Config{Schema: sp.schema}); err != nil {
			return usageErr("%v", err)
		}
		schedulers = append(schedulers, s)
	}
	for {
		// Each round within statusShardsTimeout: a shard that answers
		// the first ping and then hangs is shown as not answering.
		roundCtx, cancel := context.WithTimeout(ctx, statusShardsTimeout)
		st, err := riverslot.StatusShards(roundCtx, *tf.task, schedulers...)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{code: 130, msg: "interrupted"}
			}
			return &exitError{code: 1, msg: err.Error()}
		}
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(st); err != nil {
				return err
			}
		} else {
			if watch > 0 {
				fmt.Fprint(stdout, "\033[H\033[2J")
			}
			printShardsStatus(stdout, st)
		}
		if watch == 0 {
			if !shardsFine(st) {
				return &exitError{code: 1}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return &exitError{code: 130, msg: "interrupted"}
		case <-time.After(watch):
		}
	}
}

// shardsFine: every shard answered and is on track or starting, and
// every slot has one shard.
func shardsFine(st *riverslot.ShardsStatus) bool { return st.OnTrack || st.Starting }

// printShardsStatus prints the fleet's cycle: one line per shard, the
// totals, the shard serving each slot, and the verdict.
func printShardsStatus(w io.Writer, st *riverslot.ShardsStatus) {
	fmt.Fprintf(w, "task %s, cycle %s over %d shards: %d slots served by the shards that answered\n",
		st.Task, st.CycleStart.UTC().Format(time.RFC3339), len(st.Shards), st.Slots)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tMAP\tSLOTS\tDONE\tFAILED\tBEHIND\tEXPECTED\tENQUEUED\tSYNCED\tSKIPPED\tPENDING\tRUNNING\tLATENESS\tVERDICT")
	for _, sc := range st.Shards {
		c := sc.Status
		if c == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", sc.Shard, oneLine(sc.Error))
			continue
		}
		lateness := "unknown"
		if c.LatenessKnown {
			lateness = fmt.Sprintf("p50 %.2fs p99 %.2fs", c.LatenessP50.Seconds(), c.LatenessP99.Seconds())
		}
		fmt.Fprintf(tw, "%s\tv%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", sc.Shard, c.ShardVersion, c.Slots-c.SlotsElsewhere,
			c.SlotsDone, c.SlotsFailed, c.BehindSlots, c.AccountsExpected, c.Enqueued, c.Synced, c.Gone+c.SkippedStale+c.SkippedUpstream,
			c.Pending, c.Running, lateness, oneLine(c.Verdict))
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
