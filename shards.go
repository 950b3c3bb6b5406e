package riverslot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
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

// ErrShardMapsDisagree is wrapped by the errors of a change that finds, or
// leaves, the task's shards holding different latest maps (a change
// written on some shards only, whose undo failed): RepairShardMap
// (riverslot shards repair) brings them to one map.
var ErrShardMapsDisagree = errors.New("the shards' maps of the task disagree")

// ShardMapChange is a change of a task's shard map, for ChangeShardMap.
type ShardMapChange struct {
	// Shards are every shard of the task, each with its pool and River's
	// schema: those already holding maps of the task, and new ones (no map
	// of the task yet), which join the fleet with this change.
	Shards []Shard
	// Task is the task whose map to change.
	Task string
	// Map is the new map. Its Version is set to the shards' latest + 1
	// when 0.
	Map ShardMap
	// From is the first cycle start the map applies to: at least
	// ShardMapLeadMin ahead as each shard is written, and after every
	// shard's last cycle of the task. Defaults to every cycle, which only
	// a task no shard has made a cycle of may take (the fleet's first map).
	From time.Time
	// Plan is the task's plan, whose slots every range must fall on.
	// Defaults to the plan of the latest cycle any shard has made of the
	// task (its ledger); a task no shard has made a cycle of, with no
	// Plan, is not checked. Give it when the task's plan changes.
	Plan *slotplan.Plan
}

// SetShardMap makes m the task's next shard map on every shard, for the
// cycles starting at or after from: ChangeShardMap with the task's plan
// from its ledger (docs/shards.md).
func SetShardMap(ctx context.Context, shards []Shard, task string, m ShardMap, from time.Time) error {
	_, err := ChangeShardMap(ctx, &ShardMapChange{Shards: shards, Task: task, Map: m, From: from})
	return err
}

// ChangeShardMap makes c.Map the task's next shard map on every shard, for
// the cycles starting at or after c.From, and returns it: each shard's
// bootstraps read its own copy, in the transaction that makes the cycle,
// so a node never serves buckets its shard does not own in that cycle,
// whatever it ran before. Every shard the map names, or any shard's
// latest map names, must be in c.Shards; the latest maps of those holding
// one must agree (else the error wraps ErrShardMapsDisagree:
// RepairShardMap), and a shard holding none joins at this version. Every
// range must fall on the task's slots (c.Plan).
//
// The shards are written one at a time, those that lose the most buckets
// first, each checking the ShardMapLeadMin lead as it is written: a
// failure part-way undoes the shards written (each refuses the undo if a
// cycle already follows the new map there) and returns the error; an undo
// that fails too leaves the maps disagreeing, and the error wraps
// ErrShardMapsDisagree, naming the shards written. Moving buckets
// therefore takes effect at a cycle boundary on both sides: the old shard
// serves them up to the cycle before From, the new one from there.
func ChangeShardMap(ctx context.Context, c *ShardMapChange) (ShardMap, error) {
	m, from, task := c.Map, c.From, c.Task
	m.Ranges = slices.Clone(m.Ranges)
	if err := m.Validate(); err != nil {
		return ShardMap{}, err
	}
	if err := checkShardLead(from); err != nil {
		return ShardMap{}, err
	}
	latest, err := readShardMaps(ctx, c.Shards, task, m)
	if err != nil {
		return ShardMap{}, err
	}
	if err := checkShardPlan(ctx, c.Shards, task, m, c.Plan); err != nil {
		return ShardMap{}, err
	}
	// The latest maps of the shards holding one agree, and tell the order.
	var (
		old    StoredShardMap
		holder string
	)
	for i, cur := range latest {
		if cur == nil {
			continue
		}
		if holder != "" && !sameStoredMap(*cur, old) {
			return ShardMap{}, fmt.Errorf("%w: task %q: shard %q has %s (from %s), shard %q %s (from %s); a change was made on some shards only: bring them to one map with riverslot shards repair (riverslot.RepairShardMap), then change it",
				ErrShardMapsDisagree, task, c.Shards[i].Name, cur.String(), fromText(cur.EffectiveFrom), holder, old.String(), fromText(old.EffectiveFrom))
		}
		old, holder = *cur, c.Shards[i].Name
	}
	if m.Version == 0 {
		m.Version = old.Version + 1
	}
	if m.Version != old.Version+1 {
		return ShardMap{}, fmt.Errorf("shard map version %d of task %q: the shards' latest is %d; give version %d (or 0)", m.Version, task, old.Version, old.Version+1)
	}
	order := slices.Clone(c.Shards)
	slices.SortStableFunc(order, func(a, b Shard) int {
		return bucketsLost(old.ShardMap, m, b.Name) - bucketsLost(old.ShardMap, m, a.Name)
	})

	var written []Shard
	for _, s := range order {
		err := writeShard(ctx, s, task, from, func(tx pgx.Tx, led ledger.Ledger) error { return led.InsertShardMap(ctx, tx, task, m, from) })
		if err == nil {
			written = append(written, s)
			continue
		}
		errs := []error{fmt.Errorf("shard %q: %w", s.Name, err)}
		var stuck []string
		for _, w := range written {
			if uerr := undoShardMap(ctx, w, task, m.Version); uerr != nil {
				errs = append(errs, fmt.Errorf("undoing it on shard %q: %w", w.Name, uerr))
				stuck = append(stuck, w.Name)
			}
		}
		if len(stuck) > 0 {
			errs = append(errs, fmt.Errorf("%w: shards %v hold version %d (from %s), the others do not; riverslot shards show names them, and riverslot shards repair (riverslot.RepairShardMap) brings every shard to one map",
				ErrShardMapsDisagree, stuck, m.Version, fromText(from)))
		}
		return ShardMap{}, errors.Join(errs...)
	}
	return m, nil
}

// ShardMapRepair is a repair of a task's shard maps, for RepairShardMap.
type ShardMapRepair struct {
	// Shards are every shard of the task, whatever maps they hold.
	Shards []Shard
	// Task is the task whose maps to repair.
	Task string
	// Map is the map every shard is to hold. Defaults to the ranges of the
	// highest version any shard holds (the change written on some shards
	// only is completed).
	Map *ShardMap
	// From is the first cycle start the map applies to. Defaults to the
	// start of the highest version any shard holds. Unless zero (every
	// cycle), it must be at least ShardMapLeadMin ahead as each shard is
	// written.
	From *time.Time
	// Plan is the task's plan, whose slots every range must fall on, as
	// in ShardMapChange.
	Plan *slotplan.Plan
}

// RepairShardMap brings every shard of the task to one map after a change
// written on some shards only (an error wrapping ErrShardMapsDisagree),
// whatever versions they hold: each gets c.Map from c.From as one version,
// above every version any shard holds. It refuses on a shard (wrapping
// ledger.ErrShardMapLate) only a map that would change the shards of a
// cycle that shard has made (one at or after the start that followed
// other ranges): give a later start, or the ranges that cycle followed.
// Shards are written one at a time, none undone: a failure part-way
// leaves the maps disagreeing, and the repair may be run again. When the
// shards already agree and c gives neither Map nor From, it writes nothing
// and returns false with the map they hold.
func RepairShardMap(ctx context.Context, c *ShardMapRepair) (StoredShardMap, bool, error) {
	task := c.Task
	if len(c.Shards) == 0 {
		return StoredShardMap{}, false, errors.New("RepairShardMap needs the task's shards")
	}
	var target StoredShardMap
	if c.Map != nil {
		target.Ranges = slices.Clone(c.Map.Ranges)
		if err := target.Validate(); err != nil {
			return StoredShardMap{}, false, err
		}
	}
	latest, err := readShardMaps(ctx, c.Shards, task, target.ShardMap)
	if err != nil {
		return StoredShardMap{}, false, err
	}
	var top *StoredShardMap
	agree := true
	for _, cur := range latest {
		switch {
		case cur == nil:
			agree = false
		case top == nil:
			top = cur
		default:
			agree = agree && sameStoredMap(*cur, *top)
			if cur.Version > top.Version {
				top = cur
			}
		}
	}
	if top == nil && c.Map == nil {
		return StoredShardMap{}, false, fmt.Errorf("no shard holds a shard map of task %q: set the fleet's first map (riverslot shards set, riverslot.SetShardMap)", task)
	}
	if agree && c.Map == nil && c.From == nil {
		return *top, false, nil
	}
	if top != nil {
		if c.Map == nil {
			target.Ranges = slices.Clone(top.Ranges)
		}
		target.EffectiveFrom, target.Version = top.EffectiveFrom, top.Version
	}
	if c.From != nil {
		target.EffectiveFrom = *c.From
	}
	target.Version++
	m, from := target.ShardMap, target.EffectiveFrom
	if err := checkShardLead(from); err != nil {
		return StoredShardMap{}, false, fmt.Errorf("%w (the start of the map to repair to: riverslot shards repair --at, riverslot.ShardMapRepair.From)", err)
	}
	if err := checkShardPlan(ctx, c.Shards, task, m, c.Plan); err != nil {
		return StoredShardMap{}, false, err
	}
	// Every shard's made cycles first, so that a repair refused for one
	// writes none (each is checked again as it is written).
	for _, s := range c.Shards {
		if err := ledger.New(s.Schema).CheckMadeCycles(ctx, s.Pool, task, m, from); err != nil {
			return StoredShardMap{}, false, fmt.Errorf("shard %q: %w (nothing written)", s.Name, err)
		}
	}
	order := slices.Clone(c.Shards)
	lost := func(s Shard) int {
		if i := slices.IndexFunc(c.Shards, func(o Shard) bool { return o.Name == s.Name }); latest[i] != nil {
			return bucketsLost(latest[i].ShardMap, m, s.Name)
		}
		return 0
	}
	slices.SortStableFunc(order, func(a, b Shard) int { return lost(b) - lost(a) })
	var written []string
	for _, s := range order {
		err := writeShard(ctx, s, task, from, func(tx pgx.Tx, led ledger.Ledger) error { return led.RepairShardMap(ctx, tx, task, m, from) })
		if err != nil {
			return StoredShardMap{}, false, fmt.Errorf("shard %q: %w (%w: repaired on %v only; repair again, with a later start when a cycle of the shard refused it)", s.Name, err, ErrShardMapsDisagree, written)
		}
		written = append(written, s.Name)
	}
	return target, true, nil
}

// sameStoredMap reports whether a and b are the same version, ranges and
// start.
func sameStoredMap(a, b StoredShardMap) bool {
	return a.Version == b.Version && slices.Equal(a.Ranges, b.Ranges) && a.EffectiveFrom.Equal(b.EffectiveFrom)
}

// readShardMaps checks the shards and returns each one's latest map of the
// task (nil where it holds none); every shard m names, and every shard a
// latest map names, must be among them.
func readShardMaps(ctx context.Context, shards []Shard, task string, m ShardMap) ([]*StoredShardMap, error) {
	given := func(name string) bool {
		return slices.ContainsFunc(shards, func(s Shard) bool { return s.Name == name })
	}
	for i, s := range shards {
		if !slotplan.ValidShardName(s.Name) || s.Pool == nil {
			return nil, fmt.Errorf("shard %q: a shard needs a valid Name (1-64 letters, digits, '_', '-' or '.') and a Pool", s.Name)
		}
		if slices.ContainsFunc(shards[:i], func(o Shard) bool { return o.Name == s.Name }) {
			return nil, fmt.Errorf("shard %q is given twice; give each shard once", s.Name)
		}
	}
	for _, name := range m.Shards() {
		if !given(name) {
			return nil, fmt.Errorf("the shard map names shard %q, which is not among the shards given; give its database", name)
		}
	}
	out := make([]*StoredShardMap, len(shards))
	for i, s := range shards {
		cur, ok, err := ShardMapOf(ctx, s, task)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		for _, name := range cur.Shards() {
			if !given(name) {
				return nil, fmt.Errorf("shard %q's latest map of task %q (%s) names shard %q, which is not among the shards given; give every shard's database, so that none is left with an old map", s.Name, task, cur.String(), name)
			}
		}
		out[i] = &cur
	}
	return out, nil
}

// checkShardLead refuses a start less than ShardMapLeadMin ahead (a zero
// start, every cycle, is not checked).
func checkShardLead(from time.Time) error {
	if lead := time.Until(from); !from.IsZero() && lead < ShardMapLeadMin {
		return fmt.Errorf("the shard map must take effect at least %s from now as each shard is written (each shard is written in turn, before any makes a cycle under it), got %s (%s from now); give a later cycle start",
			ShardMapLeadMin, from.UTC().Format(time.RFC3339), lead.Round(time.Second))
	}
	return nil
}

// checkShardPlan refuses a map whose ranges do not fall on the slots of
// plan or, when nil, of the plan of the latest cycle any shard has made
// of the task (none made: not checked).
func checkShardPlan(ctx context.Context, shards []Shard, task string, m ShardMap, plan *slotplan.Plan) error {
	source := "the plan given"
	if plan == nil {
		var (
			id, on string
			latest time.Time
		)
		for _, s := range shards {
			p, start, ok, err := ledger.New(s.Schema).LatestPlan(ctx, s.Pool, task)
			if err != nil {
				return fmt.Errorf("shard %q: %w", s.Name, err)
			}
			if ok && start.After(latest) {
				id, latest, on = p, start, s.Name
			}
		}
		if id == "" {
			return nil // no cycle made, no plan given: the bootstraps warn
		}
		key, err := taskspec.ParsePlanKey(id)
		if err != nil || key.Month != "" {
			return nil // a later version's plan, or a month's (whose bootstraps refuse a map)
		}
		p, err := key.Plan()
		if err != nil {
			return nil
		}
		plan, source = &p, fmt.Sprintf("the plan of the task's latest cycle, %s on shard %q", latest.Format(time.RFC3339), on)
	}
	if err := m.Aligned(*plan); err != nil {
		return fmt.Errorf("%w (by %s; when the task's plan changes, give the new one: --cycle and --buckets, ShardMapChange.Plan)", err, source)
	}
	return nil
}

// bucketsLost returns how many buckets shard owns in old and not in m.
func bucketsLost(old, m ShardMap, shard string) int {
	n := 0
	for _, o := range old.Ranges {
		if o.Shard != shard {
			continue
		}
		for _, r := range m.Ranges {
			if lo, hi := max(o.Lo, r.Lo), min(o.Hi, r.Hi); r.Shard != shard && lo <= hi {
				n += hi - lo + 1
			}
		}
	}
	return n
}

func fromText(from time.Time) string {
	if from.IsZero() {
		return "every cycle"
	}
	return from.UTC().Format(time.RFC3339)
}

// writeShard runs write in a transaction on shard s under the task's
// shard-map lock, and commits it only while from is still ShardMapLeadMin
// ahead: the lead is checked on each shard as it is written.
func writeShard(ctx context.Context, s Shard, task string, from time.Time, write func(pgx.Tx, ledger.Ledger) error) error {
	led := ledger.New(s.Schema)
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	if err := led.LockShards(ctx, tx, task, true); err != nil {
		return err
	}
	if err := write(tx, led); err != nil {
		return err
	}
	if err := checkShardLead(from); err != nil {
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
// range moved, written to every shard by ChangeShardMap (which checks that
// the range falls on the task's slots, by its latest cycle's plan).
func MoveBuckets(ctx context.Context, shards []Shard, task string, lo, hi int, to string, from time.Time) (ShardMap, error) {
	if len(shards) == 0 {
		return ShardMap{}, errors.New("MoveBuckets needs the task's shards")
	}
	cur, err := LatestShardMap(ctx, shards, task)
	if err != nil {
		return ShardMap{}, err
	}
	next, err := cur.Move(lo, hi, to)
	if err != nil {
		return ShardMap{}, err
	}
	return ChangeShardMap(ctx, &ShardMapChange{Shards: shards, Task: task, Map: next, From: from})
}

// LatestShardMap returns the task's latest shard map on the first of
// shards that holds one (a shard joining holds none); an error when none
// does. ChangeShardMap checks that the others agree.
func LatestShardMap(ctx context.Context, shards []Shard, task string) (StoredShardMap, error) {
	for _, s := range shards {
		cur, ok, err := ShardMapOf(ctx, s, task)
		if err != nil {
			return StoredShardMap{}, err
		}
		if ok {
			return cur, nil
		}
	}
	return StoredShardMap{}, fmt.Errorf("task %q has no shard map on any shard given; set the fleet's first map (riverslot.SetShardMap, riverslot shards set)", task)
}
