package shardscmd

import (
	"context"
	"fmt"
	"io"
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
	// schema.
	Shards []riverslot.Shard
	// Task is the task whose shard map to change.
	Task string
	// Map is the new map (set); with Move, the map is the first shard's
	// latest with the move applied instead.
	Map  slotplan.ShardMap
	Move *Move
	// From is the first cycle start the change applies to. Defaults to
	// every cycle (the fleet's first map).
	From time.Time
	// Plan is the task's slots the ranges must fall on. Defaults to none:
	// not checked.
	Plan *slotplan.Plan
}

// Set changes the task's shard map on every shard (riverslot.SetShardMap)
// and prints the map now in force on w. For a set (no Move) it first
// creates the shard-map table and riverslot's ledger where missing
// (riverslot.MigrateLedger). A move of a task without a map, a move the
// map refuses or a map off the plan's slots is an *inspect.InputError.
func Set(ctx context.Context, c *SetConfig, w io.Writer) error {
	shards, next := c.Shards, c.Map
	if c.Move == nil {
		for _, s := range shards {
			if err := riverslot.MigrateLedger(ctx, s.Pool, s.Schema); err != nil {
				return fmt.Errorf("shard %q: %w", s.Name, err)
			}
		}
	} else {
		cur, ok, err := riverslot.ShardMapOf(ctx, shards[0], c.Task)
		if err != nil {
			return err
		}
		if !ok {
			return &inspect.InputError{Err: fmt.Errorf("task %q has no shard map on shard %q; set one first (riverslot shards set)", c.Task, shards[0].Name)}
		}
		if next, err = cur.Move(c.Move.Lo, c.Move.Hi, c.Move.To); err != nil {
			return &inspect.InputError{Err: err}
		}
		if c.Plan != nil {
			if err := next.Aligned(*c.Plan); err != nil {
				return &inspect.InputError{Err: err}
			}
		}
	}
	next.Version = 0 // the shards' latest + 1
	if err := riverslot.SetShardMap(ctx, shards, c.Task, next, c.From); err != nil {
		return err
	}
	m, _, err := riverslot.ShardMapOf(ctx, shards[0], c.Task)
	if err != nil {
		return err
	}
	when := "every cycle"
	if !c.From.IsZero() {
		when = "the cycles from " + c.From.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "task %s: shard map %s on %d shards, for %s\n", c.Task, m.String(), len(shards), when)
	return nil
}
