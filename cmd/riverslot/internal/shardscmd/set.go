package shardscmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
	"github.com/riverslot/riverslot/slotplan"
)

// Move is a move of buckets Lo-Hi (two-byte buckets, inclusive) to shard To.
type Move struct {
	Lo, Hi int
	To     string
}

// SetConfig is riverslot shards set or move: the values of their flags,
// which the command validates as it parses them, and the shards it
// connected.
type SetConfig struct {
	// Shards are every shard of the task, each with its pool and River's
	// schema; with set, shards holding no map of the task join the fleet.
	Shards []riverslot.Shard
	// Task is the task whose shard map to change.
	Task string
	// Map is the new map (set); with Move, the map is the shards' latest
	// with the move applied instead.
	Map  slotplan.ShardMap
	Move *Move
	// From is the first cycle start the change applies to. Defaults to
	// every cycle (the fleet's first map).
	From time.Time
	// Plan is the task's slots the ranges must fall on. Defaults to the
	// plan of the task's latest cycle in the shards' ledgers
	// (riverslot.ShardMapChange.Plan).
	Plan *slotplan.Plan
}

// Set changes the task's shard map on every shard
// (riverslot.ChangeShardMap) and prints the map now in force on w. For a
// set (no Move) it first creates the shard-map table and riverslot's
// ledger where missing (riverslot.MigrateLedger). A move of a task without
// a map, a move the map refuses or a map off the plan's slots is an
// *inspect.InputError.
func Set(ctx context.Context, c *SetConfig, w io.Writer) error {
	shards, next := c.Shards, c.Map
	if c.Move == nil {
		if err := migrate(ctx, shards); err != nil {
			return err
		}
	} else {
		cur, err := riverslot.LatestShardMap(ctx, shards, c.Task)
		if err != nil {
			return &inspect.InputError{Err: err}
		}
		if next, err = cur.Move(c.Move.Lo, c.Move.Hi, c.Move.To); err != nil {
			return &inspect.InputError{Err: err}
		}
	}
	joining, err := joiningShards(ctx, shards, c.Task)
	if err != nil {
		return err
	}
	next.Version = 0 // the shards' latest + 1
	m, err := change(ctx, shards, c.Task, next, c.From, c.Plan)
	if err != nil {
		return err
	}
	report(w, c.Task, m, len(shards), c.From, joining)
	return nil
}

// AddConfig is riverslot shards add: new shards (holding no map of the
// task) join the fleet's map from a cycle start, taking a range or none.
type AddConfig struct {
	// Shards are every shard of the task: those holding its map and the
	// new ones.
	Shards []riverslot.Shard
	// Task is the task.
	Task string
	// From is the first cycle start the new shards are in the map.
	From time.Time
	// Range, when not nil, is the buckets the new shard (exactly one) takes
	// from From. Defaults to none: nothing moves.
	Range *Move
	// Plan is as in SetConfig.
	Plan *slotplan.Plan
}

// Add creates riverslot's tables on the shards where missing
// (riverslot.MigrateLedger), then writes the fleet's latest map (with
// Range moved to the new shard) as the next version to every shard, from
// From: the shards holding no map of the task join the fleet. A fleet
// without a map, or with no new shard given, is an *inspect.InputError.
func Add(ctx context.Context, c *AddConfig, w io.Writer) error {
	if err := migrate(ctx, c.Shards); err != nil {
		return err
	}
	joining, err := joiningShards(ctx, c.Shards, c.Task)
	if err != nil {
		return err
	}
	if len(joining) == 0 {
		return &inspect.InputError{Err: fmt.Errorf("every shard given holds a map of task %q: add joins a new shard, one holding none (give its --shard); to change the ranges, use move", c.Task)}
	}
	cur, err := riverslot.LatestShardMap(ctx, c.Shards, c.Task)
	if err != nil {
		return &inspect.InputError{Err: err}
	}
	next := cur.ShardMap
	if c.Range != nil {
		if len(joining) != 1 {
			return &inspect.InputError{Err: fmt.Errorf("--range gives its buckets to the new shard, but %d shards are new (%s); add them one at a time, or without --range", len(joining), strings.Join(joining, ", "))}
		}
		if next, err = cur.Move(c.Range.Lo, c.Range.Hi, joining[0]); err != nil {
			return &inspect.InputError{Err: err}
		}
	}
	next.Version = 0
	m, err := change(ctx, c.Shards, c.Task, next, c.From, c.Plan)
	if err != nil {
		return err
	}
	report(w, c.Task, m, len(c.Shards), c.From, joining)
	return nil
}

// RepairConfig is riverslot shards repair.
type RepairConfig struct {
	// Shards are every shard of the task, whatever maps they hold.
	Shards []riverslot.Shard
	// Task is the task.
	Task string
	// Map is the map to bring every shard to. Defaults to the ranges of
	// the highest version any shard holds.
	Map *slotplan.ShardMap
	// From is its first cycle start. Defaults to that version's.
	From *time.Time
	// Plan is as in SetConfig.
	Plan *slotplan.Plan
}

// Repair brings every shard to one map (riverslot.RepairShardMap), after
// creating riverslot's tables where missing, and prints it; shards that
// already agree are left as they are. An invalid map is an
// *inspect.InputError.
func Repair(ctx context.Context, c *RepairConfig, w io.Writer) error {
	if err := migrate(ctx, c.Shards); err != nil {
		return err
	}
	m, repaired, err := riverslot.RepairShardMap(ctx, &riverslot.ShardMapRepair{Shards: c.Shards, Task: c.Task, Map: c.Map, From: c.From, Plan: c.Plan})
	if err != nil {
		return badMap(err)
	}
	if !repaired {
		fmt.Fprintf(w, "task %s: the %d shards agree on shard map %s, for %s; nothing to repair\n", c.Task, len(c.Shards), m.String(), when(m.EffectiveFrom))
		return nil
	}
	fmt.Fprintf(w, "task %s: repaired: shard map %s on %d shards, for %s\n", c.Task, m.String(), len(c.Shards), when(m.EffectiveFrom))
	return nil
}

func migrate(ctx context.Context, shards []riverslot.Shard) error {
	for _, s := range shards {
		if err := riverslot.MigrateLedger(ctx, s.Pool, s.Schema); err != nil {
			return fmt.Errorf("shard %q: %w", s.Name, err)
		}
	}
	return nil
}

// joiningShards returns the shards holding no map of the task.
func joiningShards(ctx context.Context, shards []riverslot.Shard, task string) ([]string, error) {
	var out []string
	for _, s := range shards {
		_, ok, err := riverslot.ShardMapOf(ctx, s, task)
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, s.Name)
		}
	}
	return out, nil
}

// change writes next with riverslot.ChangeShardMap; a map it refuses as
// such (off the plan's slots) is bad input.
func change(ctx context.Context, shards []riverslot.Shard, task string, next slotplan.ShardMap, from time.Time, plan *slotplan.Plan) (slotplan.ShardMap, error) {
	m, err := riverslot.ChangeShardMap(ctx, &riverslot.ShardMapChange{Shards: shards, Task: task, Map: next, From: from, Plan: plan})
	return m, badMap(err)
}

// badMap makes an error of an invalid map (slotplan.ErrShardMap: off the
// plan's slots, say) an *inspect.InputError.
func badMap(err error) error {
	if errors.Is(err, slotplan.ErrShardMap) {
		return &inspect.InputError{Err: err}
	}
	return err
}

func report(w io.Writer, task string, m slotplan.ShardMap, n int, from time.Time, joining []string) {
	fmt.Fprintf(w, "task %s: shard map %s on %d shards, for %s\n", task, m.String(), n, when(from))
	if len(joining) > 0 && m.Version > 1 {
		fmt.Fprintf(w, "joined: %s (no map of the task before; its bootstraps of earlier cycles are refused)\n", strings.Join(joining, ", "))
	}
}

func when(from time.Time) string {
	if from.IsZero() {
		return "every cycle"
	}
	return "the cycles from " + from.UTC().Format(time.RFC3339)
}
