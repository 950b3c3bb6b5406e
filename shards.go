package riverslot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/slotplan"
)

// ShardMap says which shard owns which of the 65,536 two-byte buckets
// (slotplan.ShardMap); ShardRange is one of its ranges.
type (
	ShardMap   = slotplan.ShardMap
	ShardRange = slotplan.ShardRange
)

// Shard is one database of a sharded task: its name in the shard map, a
// pool on it and River's schema there (where riverslot's ledger and the
// shard's copy of the map live).
type Shard struct {
	Name   string
	Pool   *pgxpool.Pool
	Schema string
}

// ShardMapLeadMin is how far ahead of now a new shard map may take effect:
// SetShardMap writes it to each shard in turn, and no shard may make a
// cycle under the old map while another has the new one.
const ShardMapLeadMin = 30 * time.Second

// StoredShardMap is a shard's copy of a task's shard map: its version and
// the first cycle start it applies to.
type StoredShardMap struct {
	ShardMap
	EffectiveFrom time.Time
}

// ShardMapOf returns the task's latest shard map on shard (in force or
// not yet); false when the shard holds none.
func ShardMapOf(ctx context.Context, shard Shard, task string) (StoredShardMap, bool, error) {
	m, ok, err := ledger.New(shard.Schema).LatestShardMap(ctx, shard.Pool, task)
	if err != nil {
		return StoredShardMap{}, false, fmt.Errorf("shard %q: %w", shard.Name, err)
	}
	return StoredShardMap{ShardMap: m.ShardMap, EffectiveFrom: m.EffectiveFrom}, ok, nil
}

// ShardMapAt returns the task's shard map in force, on shard, for a cycle
// starting at at.
func ShardMapAt(ctx context.Context, shard Shard, task string, at time.Time) (StoredShardMap, bool, error) {
	m, ok, err := ledger.New(shard.Schema).ShardMapAt(ctx, shard.Pool, task, at)
	if err != nil {
		return StoredShardMap{}, false, fmt.Errorf("shard %q: %w", shard.Name, err)
	}
	return StoredShardMap{ShardMap: m.ShardMap, EffectiveFrom: m.EffectiveFrom}, ok, nil
}

// SetShardMap makes m the task's next shard map on every shard, for the
// cycles starting at or after from: each shard's bootstraps read its own
// copy, in the transaction that makes the cycle, so a node never serves
// buckets its shard does not own in that cycle, whatever it ran before.
// Every shard m names must be in shards; their latest versions must agree
// (m.Version is set to that + 1 when 0). from must be at least
// ShardMapLeadMin ahead and after every shard's last cycle of the task; a
// zero from makes the map apply to every cycle, which only a task no
// shard has made a cycle of may take (the fleet's first map, set before
// its nodes start).
//
// The shards are written one at a time, those that lose buckets first:
// a failure part-way undoes the shards written (each refuses the undo if
// a cycle already follows the new map there) and returns the error. Moving
// buckets therefore takes effect at a cycle boundary on both sides: the
// old shard serves them up to the cycle before from, the new one from
// there (docs/shards.md).
func SetShardMap(ctx context.Context, shards []Shard, task string, m ShardMap, from time.Time) error {
	if err := m.Validate(); err != nil {
		return err
	}
	byName := map[string]Shard{}
	for _, s := range shards {
		if !slotplan.ValidShardName(s.Name) || s.Pool == nil {
			return fmt.Errorf("shard %q: a shard needs a valid Name (1-64 letters, digits, '_', '-' or '.') and a Pool", s.Name)
		}
		byName[s.Name] = s
	}
	for _, name := range m.Shards() {
		if _, ok := byName[name]; !ok {
			return fmt.Errorf("the shard map names shard %q, which is not among the shards given; give its database", name)
		}
	}
	if !from.IsZero() && time.Until(from) < ShardMapLeadMin {
		return fmt.Errorf("the shard map must take effect at least %s from now (each shard is written in turn, before any makes a cycle under it), got %s; give a later cycle start", ShardMapLeadMin, from.UTC().Format(time.RFC3339))
	}
	// The shards' latest maps agree, and the old one tells the order.
	var (
		old     StoredShardMap
		version = int64(-1)
	)
	for _, s := range shards {
		cur, _, err := ShardMapOf(ctx, s, task)
		if err != nil {
			return err
		}
		if version >= 0 && cur.Version != version {
			return fmt.Errorf("the shards' maps of task %q disagree: %q has version %d, another %d; a change was made on some shards only: set the map again on the shards behind", task, s.Name, cur.Version, version)
		}
		version, old = cur.Version, cur
	}
	if m.Version == 0 {
		m.Version = version + 1
	}
	if m.Version != version+1 {
		return fmt.Errorf("shard map version %d of task %q: the shards' latest is %d; give version %d (or 0)", m.Version, task, version, version+1)
	}
	order := slices.Clone(shards)
	lost := func(s Shard) int {
		n := 0
		for b := 0; b < slotplan.BucketsTwoByte; b += 256 {
			if old.Owner(b) == s.Name && m.Owner(b) != s.Name {
				n++
			}
		}
		return n
	}
	slices.SortStableFunc(order, func(a, b Shard) int { return lost(b) - lost(a) })

	var written []Shard
	for _, s := range order {
		if err := writeShardMap(ctx, s, task, m, from); err != nil {
			var undo []error
			for _, w := range written {
				if uerr := undoShardMap(ctx, w, task, m.Version); uerr != nil {
					undo = append(undo, fmt.Errorf("undoing it on shard %q: %w", w.Name, uerr))
				}
			}
			return errors.Join(append([]error{fmt.Errorf("shard %q: %w", s.Name, err)}, undo...)...)
		}
		written = append(written, s)
	}
	return nil
}

func writeShardMap(ctx context.Context, s Shard, task string, m ShardMap, from time.Time) error {
	led := ledger.New(s.Schema)
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	if err := led.LockShards(ctx, tx, task, true); err != nil {
		return err
	}
	if err := led.InsertShardMap(ctx, tx, task, m, from); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func undoShardMap(ctx context.Context, s Shard, task string, version int64) error {
	led := ledger.New(s.Schema)
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	if err := led.LockShards(ctx, tx, task, true); err != nil {
		return err
	}
	if err := led.DeleteShardMap(ctx, tx, task, version); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// MoveBuckets gives buckets lo to hi (of the 65,536) to shard to, from the
// cycles starting at or after from: the task's latest shard map with the
// range moved, written to every shard by SetShardMap.
func MoveBuckets(ctx context.Context, shards []Shard, task string, lo, hi int, to string, from time.Time) (ShardMap, error) {
	if len(shards) == 0 {
		return ShardMap{}, errors.New("MoveBuckets needs the task's shards")
	}
	cur, ok, err := ShardMapOf(ctx, shards[0], task)
	if err != nil {
		return ShardMap{}, err
	}
	if !ok {
		return ShardMap{}, fmt.Errorf("task %q has no shard map on shard %q; set one first (SetShardMap, riverslot shards set)", task, shards[0].Name)
	}
	next, err := cur.Move(lo, hi, to)
	if err != nil {
		return ShardMap{}, err
	}
	return next, SetShardMap(ctx, shards, task, next, from)
}
