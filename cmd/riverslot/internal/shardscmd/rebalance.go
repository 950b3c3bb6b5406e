package shardscmd

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// RebalanceConfig is riverslot shards rebalance --to-even.
type RebalanceConfig struct {
	// Shards are every shard of the task: those of its map and any new
	// one to give buckets to.
	Shards []riverslot.Shard
	// Task is the task.
	Task string
	// Weights are the shards' weights: each owns buckets in proportion.
	// A shard given and not named weighs 1.
	Weights map[string]float64
	// From is the first cycle start the new map applies to; zero only
	// with DryRun.
	From time.Time
	// Plan is the task's slots, on whose bounds every move falls.
	// Defaults to the plan of the task's latest cycle in the shards'
	// ledgers.
	Plan *slotplan.Plan
	// DryRun prints the moves and writes nothing.
	DryRun bool
}

// Rebalance prints the moves that give each shard buckets in proportion to
// its weight (slotplan.ShardMap.Rebalance over the fleet's latest map) and,
// unless c.DryRun, writes the new map to every shard from c.From the way
// set and move do (riverslot.ChangeShardMap: the lead, the order of writes
// and the undo apply). Maps that disagree, a weight for a shard not
// given and a task with no plan to go by are an *inspect.InputError.
func Rebalance(ctx context.Context, c *RebalanceConfig, w io.Writer) error {
	for name := range c.Weights {
		if !slices.ContainsFunc(c.Shards, func(s riverslot.Shard) bool { return s.Name == name }) {
			return inputErr("--weights names shard %q, which is not among --shard; give its database, or leave it out", name)
		}
	}
	var (
		cur    riverslot.StoredShardMap
		holder string
	)
	for _, s := range c.Shards {
		m, ok, err := riverslot.ShardMapOf(ctx, s, c.Task)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if holder != "" && (m.Version != cur.Version || !slices.Equal(m.Ranges, cur.Ranges)) {
			return inputErr("the shards' latest maps of task %s disagree (%s has %s, %s %s): bring them to one map first (riverslot shards repair)", c.Task, holder, cur.String(), s.Name, m.String())
		}
		cur, holder = m, s.Name
	}
	if holder == "" {
		return inputErr("task %q has no shard map on any shard given; set the fleet's first map (riverslot shards set)", c.Task)
	}
	plan, source, err := taskPlan(ctx, c.Shards, c.Task, c.Plan)
	if err != nil {
		return err
	}
	weights := map[string]float64{}
	for _, s := range c.Shards {
		weights[s.Name] = 1
	}
	for name, wt := range c.Weights {
		weights[name] = wt
	}
	for _, name := range cur.Shards() {
		if _, ok := weights[name]; !ok {
			return inputErr("the latest map names shard %q, which is not among --shard; give every shard's database", name)
		}
	}
	next, moves, err := cur.Rebalance(plan, weights)
	if err != nil {
		return badMap(err)
	}

	width := plan.BucketsPerSlot * (slotplan.BucketsTwoByte / plan.Buckets)
	fmt.Fprintf(w, "task %s: shard map %s (from %s), on the slots of %s (%d slots of %d buckets)\n",
		c.Task, cur.String(), fromText(cur.EffectiveFrom), source, slotplan.BucketsTwoByte/width, width)
	if len(moves) == 0 {
		fmt.Fprintln(w, "already even: every shard owns its share within one slot; nothing to move")
		return nil
	}
	printPlan(w, cur.ShardMap, next, moves, weights)
	if c.DryRun {
		fmt.Fprintf(w, "dry run: nothing written; without --dry-run, the new map is written to every shard from --at\n")
		return nil
	}
	if err := migrate(ctx, c.Shards); err != nil {
		return err
	}
	next.Version = 0 // the shards' latest + 1
	m, err := change(ctx, c.Shards, c.Task, next, c.From, c.Plan)
	if err != nil {
		return err
	}
	report(w, c.Task, m, len(c.Shards), c.From, nil)
	return nil
}

// printPlan writes the moves and each shard's buckets before and after.
func printPlan(w io.Writer, cur, next slotplan.ShardMap, moves []slotplan.ShardMove, weights map[string]float64) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MOVE\tRANGE\tBUCKETS\tFROM\tTO")
	for i, mv := range moves {
		fmt.Fprintf(tw, "%d\t%d-%d\t%d\t%s\t%s\n", i+1, mv.Lo, mv.Hi, mv.Hi-mv.Lo+1, mv.From, mv.To)
	}
	_ = tw.Flush()
	before, after := bucketCounts(cur), bucketCounts(next)
	names := slices.Sorted(maps.Keys(weights))
	total := 0.0
	for _, wt := range weights {
		total += wt
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tWEIGHT\tSHARE\tBEFORE\tAFTER")
	for _, name := range names {
		share := float64(slotplan.BucketsTwoByte) * weights[name] / total
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%d\t%d\n", name, strconv.FormatFloat(weights[name], 'g', -1, 64), share, before[name], after[name])
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nnew map: %s\n", next.String())
	fmt.Fprintln(w, "where each shard holds its own accounts, copy each move's range before it takes effect: riverslot shards copy-accounts --range LO-HI --from FROM --to TO --table T")
}

// bucketCounts returns how many buckets each shard owns in m.
func bucketCounts(m slotplan.ShardMap) map[string]int {
	out := map[string]int{}
	for _, r := range m.Ranges {
		out[r.Shard] += r.Hi - r.Lo + 1
	}
	return out
}

// taskPlan returns plan when given, else the plan of the task's latest
// cycle in the shards' ledgers, and says which.
func taskPlan(ctx context.Context, shards []riverslot.Shard, task string, plan *slotplan.Plan) (slotplan.Plan, string, error) {
	if plan != nil {
		return *plan, "the plan given (a " + plan.Cycle.String() + " cycle)", nil
	}
	var (
		id, on string
		latest time.Time
	)
	for _, s := range shards {
		p, start, ok, err := ledger.New(s.Schema).LatestPlan(ctx, s.Pool, task)
		if err != nil {
			return slotplan.Plan{}, "", fmt.Errorf("shard %q: %w", s.Name, err)
		}
		if ok && start.After(latest) {
			id, latest, on = p, start, s.Name
		}
	}
	if id == "" {
		return slotplan.Plan{}, "", inputErr("no shard has made a cycle of task %s, so its slots are not known: give --cycle (and --buckets)", task)
	}
	key, err := taskspec.ParsePlanKey(id)
	if err == nil && key.Month != "" {
		return slotplan.Plan{}, "", inputErr("task %s's latest cycle is a calendar month's, which a shard map does not serve", task)
	}
	p, err := key.Plan()
	if err != nil {
		return slotplan.Plan{}, "", inputErr("the plan %q of task %s's latest cycle is not known to this version: give --cycle (and --buckets)", id, task)
	}
	return p, fmt.Sprintf("its latest cycle's plan (a %s cycle, %s on shard %s)", p.Cycle, latest.Format(time.RFC3339), on), nil
}
