package shardscmd

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// movedMax is how many of the latest map changes show looks back over for
// ranges that moved away from a shard.
const movedMax = 8

// farFuture is after every cycle start.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// movedView is a range that moved away from a shard (and did not come
// back), and when that shard's copies of its accounts may be deleted.
type movedView struct {
	Lo            int       `json:"lo"`
	Hi            int       `json:"hi"`
	From          string    `json:"from"`
	To            string    `json:"to"`
	Version       int64     `json:"version"`
	EffectiveFrom time.Time `json:"effective_from"`
	// DeleteFrom is the earliest time the old shard's copies may be
	// deleted: the deadline of its last cycle before the move (no sync of
	// it starts later); zero when no cycle tells the task's late window.
	DeleteFrom time.Time `json:"delete_from,omitzero"`
	// Safe: every shard has made a cycle of the new map and DeleteFrom has
	// passed. Waiting says what is still to come when not.
	Safe      bool     `json:"safe"`
	Waiting   []string `json:"waiting,omitempty"`
	Predicate string   `json:"predicate"`
}

// movedAway returns the ranges the task's last movedMax map changes moved
// away from a shard, by the history of the shard holding the highest
// version (views, as shardOf read them), each with when its old shard's
// copies may be deleted: once the first cycle of the new map has started
// on every shard and no cycle of the old shard before it can still sync
// them (its deadline, the latest NotAfter of its syncs, has passed).
func movedAway(ctx context.Context, shards []riverslot.Shard, task string, views []shardView, now time.Time) ([]movedView, error) {
	top := -1
	for i, v := range views {
		if v.MapVersion > 0 && (top < 0 || v.MapVersion > views[top].MapVersion) {
			top = i
		}
	}
	if top < 0 {
		return nil, nil
	}
	led := ledger.New(shards[top].Schema)
	var history []ledger.ShardMap // oldest first
	for v := views[top].MapVersion; v >= 1 && len(history) <= movedMax; v-- {
		m, ok, err := led.ShardMapVersion(ctx, shards[top].Pool, task, v)
		if err != nil {
			return nil, fmt.Errorf("shard %q: %w", shards[top].Name, err)
		}
		if ok {
			history = append([]ledger.ShardMap{m}, history...)
		}
	}
	// A version followed by one from the same start was never in force.
	var inForce []ledger.ShardMap
	for i, m := range history {
		if i+1 < len(history) && !history[i+1].EffectiveFrom.After(m.EffectiveFrom) {
			continue
		}
		inForce = append(inForce, m)
	}
	if len(inForce) == 0 {
		return nil, nil
	}
	latest := inForce[len(inForce)-1].ShardMap
	var out []movedView
	for i := 1; i < len(inForce); i++ {
		prev, next := inForce[i-1], inForce[i]
		for _, mv := range diffMaps(prev.ShardMap, next.ShardMap, latest) {
			v := movedView{Lo: mv.Lo, Hi: mv.Hi, From: mv.From, To: mv.To, Version: next.Version, EffectiveFrom: next.EffectiveFrom,
				Predicate: sqlbucket.ExprFor("id", slotplan.BucketsTwoByte) + " BETWEEN " + strconv.Itoa(mv.Lo) + " AND " + strconv.Itoa(mv.Hi)}
			if err := deletable(ctx, shards, task, views, &v, now); err != nil {
				return nil, err
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// diffMaps returns the ranges whose shard differs between prev and next,
// leaving out the buckets latest gives back to their shard in prev.
func diffMaps(prev, next, latest slotplan.ShardMap) []slotplan.ShardMove {
	var bounds []int
	for _, m := range []slotplan.ShardMap{prev, next, latest} {
		for _, r := range m.Ranges {
			bounds = append(bounds, r.Lo)
		}
	}
	bounds = append(bounds, slotplan.BucketsTwoByte)
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	var out []slotplan.ShardMove
	for i := 0; i+1 < len(bounds); i++ {
		lo, hi := bounds[i], bounds[i+1]-1
		from, to := prev.Owner(lo), next.Owner(lo)
		if from == to || latest.Owner(lo) == from {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Hi+1 == lo && out[n-1].From == from && out[n-1].To == to {
			out[n-1].Hi = hi
			continue
		}
		out = append(out, slotplan.ShardMove{Lo: lo, Hi: hi, From: from, To: to})
	}
	return out
}

// deletable fills in v's DeleteFrom, Safe and Waiting.
func deletable(ctx context.Context, shards []riverslot.Shard, task string, views []shardView, v *movedView, now time.Time) error {
	for _, s := range views {
		if s.CycleStart.Before(v.EffectiveFrom) {
			v.Waiting = append(v.Waiting, fmt.Sprintf("shard %s has not made the cycle from %s yet", s.Shard, fromText(v.EffectiveFrom)))
		}
	}
	i := slices.IndexFunc(shards, func(s riverslot.Shard) bool { return s.Name == v.From })
	if i < 0 {
		v.Waiting = append(v.Waiting, fmt.Sprintf("shard %s is not among --shard: give it, to read its cycles", v.From))
		return nil
	}
	old := shards[i]
	led := ledger.New(old.Schema)
	before, err := led.Cycles(ctx, old.Pool, task, time.Time{}, v.EffectiveFrom, 1)
	if err != nil {
		return fmt.Errorf("shard %q: %w", old.Name, err)
	}
	// The old shard's last cycle before the move ends at its start; the
	// late window (its deadline after its end) is the latest recorded
	// cycle's, on the old shard or any other.
	var (
		window *time.Duration
		last   time.Time
	)
	if len(before) > 0 {
		c := before[0]
		if d, ok := lateWindow(c); ok {
			window, last = &d, c.Deadline
			if last.IsZero() {
				last = c.Start.Add(cycleOf(c)).Add(d)
			}
		}
	}
	if window == nil {
		for _, s := range shards {
			cs, err := ledger.New(s.Schema).Cycles(ctx, s.Pool, task, time.Time{}, farFuture, 1)
			if err != nil {
				return fmt.Errorf("shard %q: %w", s.Name, err)
			}
			if len(cs) > 0 {
				if d, ok := lateWindow(cs[0]); ok {
					window = &d
					break
				}
			}
		}
	}
	if window == nil {
		v.Waiting = append(v.Waiting, fmt.Sprintf("no cycle of task %s tells its late window: wait until the old map's last cycle on %s, ending at %s, is past its late window (half a cycle, plus LateGrace)", task, v.From, fromText(v.EffectiveFrom)))
		return nil
	}
	v.DeleteFrom = v.EffectiveFrom.Add(*window)
	if last.After(v.DeleteFrom) {
		v.DeleteFrom = last
	}
	if now.Before(v.DeleteFrom) {
		v.Waiting = append(v.Waiting, fmt.Sprintf("shard %s's last cycle before the move may sync them until %s", v.From, v.DeleteFrom.UTC().Format(time.RFC3339)))
	}
	v.Safe = len(v.Waiting) == 0
	return nil
}

// lateWindow returns how long after its end a cycle's syncs may start
// (its deadline after its end), by its record or, recorded without, its
// plan: half a cycle plus its LateGrace.
func lateWindow(c ledger.Cycle) (time.Duration, bool) {
	if !c.Deadline.IsZero() && !c.End.IsZero() {
		return c.Deadline.Sub(c.End), true
	}
	p, err := c.Plan.Plan()
	if err != nil || c.Plan.Month != "" {
		return 0, false
	}
	return p.Cycle/2 + c.LateGrace, true
}

// cycleOf returns a cycle's length, by its record or its plan.
func cycleOf(c ledger.Cycle) time.Duration {
	if !c.End.IsZero() {
		return c.End.Sub(c.Start)
	}
	if p, err := c.Plan.Plan(); err == nil {
		return p.Cycle
	}
	return 0
}

// printMoved writes the moved ranges under show's table.
func printMoved(w io.Writer, moved []movedView) error {
	if len(moved) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nmoved away (the old shard's copies of a range may be deleted once the new map's first cycle has started on every shard and no cycle of the old map can still sync them):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANGE\tFROM\tTO\tSINCE\tDELETE FROM\tSTATE")
	for _, m := range moved {
		del := "-"
		if !m.DeleteFrom.IsZero() {
			del = m.DeleteFrom.UTC().Format(time.RFC3339)
		}
		state := "safe now"
		if !m.Safe {
			state = "waiting: " + strings.Join(m.Waiting, "; ")
		}
		fmt.Fprintf(tw, "%d-%d\t%s\t%s\t%s (v%d)\t%s\t%s\n", m.Lo, m.Hi, m.From, m.To, fromText(m.EffectiveFrom), m.Version, del, state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range moved {
		fmt.Fprintf(w, "on %s, buckets %d-%d: DELETE FROM <accounts table> WHERE %s (with the task's IDColumn for \"id\" if it is not id)\n", m.From, m.Lo, m.Hi, m.Predicate)
	}
	return nil
}
