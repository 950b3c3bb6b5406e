package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/slotplan"
)

// ShardsTable holds a shard's copy of each sharded task's shard maps, in
// River's schema beside the ledger.
const ShardsTable = "riverslot_shards"

// ShardMap is one version of a task's shard map and the first cycle start
// it applies to.
type ShardMap struct {
	slotplan.ShardMap
	EffectiveFrom time.Time
}

// LockShards takes the task's shard-map lock in tx, until it ends: shared
// by a bootstrap (which reads the map in force at its cycle), exclusive
// by a change of the map (which must not land between a bootstrap's read
// and its commit).
func (l Ledger) LockShards(ctx context.Context, tx pgx.Tx, task string, exclusive bool) error {
	fn := "pg_advisory_xact_lock_shared"
	if exclusive {
		fn = "pg_advisory_xact_lock"
	}
	_, err := tx.Exec(ctx, "SELECT "+fn+"(hashtextextended($1, 0))", l.shards+" "+task)
	return wrap(err, "locking the task's shard map")
}

// ShardMapAt returns the task's shard map in force for a cycle starting at
// at (the highest version effective from at or before it); false when the
// task has none (it is not sharded, or not before at).
func (l Ledger) ShardMapAt(ctx context.Context, q Queryer, task string, at time.Time) (ShardMap, bool, error) {
	return l.shardMap(ctx, q, "SELECT version, effective_from, map FROM "+l.shards+
		" WHERE task = $1 AND effective_from <= $2 ORDER BY version DESC LIMIT 1", task, at)
}

// ShardMapVersion returns the task's shard map of version.
func (l Ledger) ShardMapVersion(ctx context.Context, q Queryer, task string, version int64) (ShardMap, bool, error) {
	return l.shardMap(ctx, q, "SELECT version, effective_from, map FROM "+l.shards+" WHERE task = $1 AND version = $2", task, version)
}

// LatestShardMap returns the task's latest shard map, in force or not yet.
func (l Ledger) LatestShardMap(ctx context.Context, q Queryer, task string) (ShardMap, bool, error) {
	return l.shardMap(ctx, q, "SELECT version, effective_from, map FROM "+l.shards+" WHERE task = $1 ORDER BY version DESC LIMIT 1", task)
}

// ShardedTasks returns the tasks this shard holds maps of.
func (l Ledger) ShardedTasks(ctx context.Context, q Queryer) ([]string, error) {
	rows, err := q.Query(ctx, "SELECT DISTINCT task FROM "+l.shards+" ORDER BY 1")
	if isUndefinedTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err, "reading the shard maps")
	}
	tasks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if isUndefinedTable(err) {
		return nil, nil
	}
	return tasks, wrap(err, "reading the shard maps")
}

func (l Ledger) shardMap(ctx context.Context, q Queryer, sql string, args ...any) (ShardMap, bool, error) {
	// A ledger before version 5 has no maps: looked up first, so that a
	// bootstrap's transaction is not aborted by the missing table (an
	// unsharded fleet's new nodes run on it until Migrate).
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", l.shards).Scan(&exists); err != nil {
		return ShardMap{}, false, wrap(err, "reading the shard map")
	}
	if !exists {
		return ShardMap{}, false, nil
	}
	var (
		m   ShardMap
		raw []byte
	)
	err := q.QueryRow(ctx, sql, args...).Scan(&m.Version, &m.EffectiveFrom, &raw)
	switch {
	case errors.Is(err, pgx.ErrNoRows), isUndefinedTable(err):
		return ShardMap{}, false, nil
	case err != nil:
		return ShardMap{}, false, wrap(err, "reading the shard map")
	}
	version := m.Version
	if err := json.Unmarshal(raw, &m.ShardMap); err != nil {
		return ShardMap{}, false, fmt.Errorf("reading shard map version %d: %w", version, err)
	}
	m.Version, m.EffectiveFrom = version, m.EffectiveFrom.UTC()
	if err := m.Validate(); err != nil {
		return ShardMap{}, false, fmt.Errorf("shard map version %d of this shard: %w", version, err)
	}
	return m, true, nil
}

// ErrShardMapLate is wrapped by InsertShardMap's error when the shard has
// bootstrapped a cycle at or after the new map's effective start: the map
// would change a cycle already made.
var ErrShardMapLate = errors.New("the shard has already made a cycle the new shard map would apply to")

// InsertShardMap records m, effective from cycles starting at or after
// from, as the task's next version in tx, after LockShards(exclusive).
// It refuses a version that is not the shard's latest + 1 (any version
// on a shard with no map of the task: it joins the fleet) and, wrapping
// ErrShardMapLate, a map whose first cycle this shard has bootstrapped.
func (l Ledger) InsertShardMap(ctx context.Context, tx pgx.Tx, task string, m slotplan.ShardMap, from time.Time) error {
	latest, ok, err := l.LatestShardMap(ctx, tx, task)
	if err != nil {
		return err
	}
	// A shard with no map of the task joins the fleet at the fleet's next
	// version; one with maps takes only the version after its latest.
	if want := latest.Version + 1; (ok && m.Version != want) || m.Version < 1 {
		return fmt.Errorf("shard map version %d of task %q: this shard's latest is %d (want %d); the shards' maps disagree, or another change came first", m.Version, task, latest.Version, want)
	}
	if ok && from.Before(latest.EffectiveFrom) {
		return fmt.Errorf("shard map version %d of task %q takes effect at %s, before version %d (%s): give a later start", m.Version, task, from.Format(time.RFC3339), latest.Version, latest.EffectiveFrom.Format(time.RFC3339))
	}
	var made *time.Time
	if err := tx.QueryRow(ctx, "SELECT max(cycle_start) FROM "+l.table+" WHERE task = $1 AND slot = $2 AND cycle_start >= $3", task, BootstrapSlot, from).Scan(&made); err != nil {
		return wrap(err, "reading the shard's cycles")
	}
	if made != nil {
		return fmt.Errorf("%w (task %q: cycle %s, the new map from %s): give a start after the shard's last cycle", ErrShardMapLate, task, made.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+l.shards+" (task, version, effective_from, map) VALUES ($1, $2, $3, $4)", task, m.Version, from, raw)
	return wrap(err, "recording the shard map")
}

// DeleteShardMap removes version of the task's map in tx (after
// LockShards(exclusive)), undoing an InsertShardMap whose change could not
// be made on every shard; it refuses when this shard has bootstrapped a
// cycle under that version.
func (l Ledger) DeleteShardMap(ctx context.Context, tx pgx.Tx, task string, version int64) error {
	var used bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+l.table+" WHERE task = $1 AND slot = $2 AND shard_version = $3)", task, BootstrapSlot, version).Scan(&used); err != nil {
		return wrap(err, "reading the shard's cycles")
	}
	if used {
		return fmt.Errorf("shard map version %d of task %q cannot be undone on this shard: a cycle already follows it", version, task)
	}
	_, err := tx.Exec(ctx, "DELETE FROM "+l.shards+" WHERE task = $1 AND version = $2", task, version)
	return wrap(err, "undoing the shard map")
}

// RepairShardMap records m, effective from cycles starting at or after
// from, as the task's version m.Version in tx (after
// LockShards(exclusive)), whatever versions the shard holds: it brings a
// shard to the map its fleet agreed on after a change written on some
// shards only. m.Version must be above every version the shard holds
// (the versions it skips stay, never in force again). It refuses, wrapping
// ErrShardMapLate, only a map that would change the shards of a cycle
// this shard has made: one at or after from that followed other ranges
// (or no map).
func (l Ledger) RepairShardMap(ctx context.Context, tx pgx.Tx, task string, m slotplan.ShardMap, from time.Time) error {
	latest, _, err := l.LatestShardMap(ctx, tx, task)
	if err != nil {
		return err
	}
	if m.Version <= latest.Version {
		return fmt.Errorf("shard map version %d of task %q: this shard holds version %d; give a later version", m.Version, task, latest.Version)
	}
	if err := l.CheckMadeCycles(ctx, tx, task, m, from); err != nil {
		return err
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+l.shards+" (task, version, effective_from, map) VALUES ($1, $2, $3, $4)", task, m.Version, from, raw)
	return wrap(err, "recording the shard map")
}

// CheckMadeCycles refuses, wrapping ErrShardMapLate, a map from from that
// would change the shards of a cycle this shard has made: one at or after
// from that followed other ranges (or no map).
func (l Ledger) CheckMadeCycles(ctx context.Context, q Queryer, task string, m slotplan.ShardMap, from time.Time) error {
	rows, err := q.Query(ctx, "SELECT cycle_start, shard_version FROM "+l.table+" WHERE task = $1 AND slot = $2 AND cycle_start >= $3 ORDER BY cycle_start", task, BootstrapSlot, from)
	if err != nil {
		return wrap(err, "reading the shard's cycles")
	}
	type made struct {
		start   time.Time
		version *int64
	}
	cycles, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (made, error) {
		var c made
		return c, r.Scan(&c.start, &c.version)
	})
	if err != nil {
		return wrap(err, "reading the shard's cycles")
	}
	for _, c := range cycles {
		var followed ShardMap
		if c.version != nil {
			if followed, _, err = l.ShardMapVersion(ctx, q, task, *c.version); err != nil {
				return err
			}
		}
		if !slices.Equal(followed.Ranges, m.Ranges) {
			was := "no shard map"
			if c.version != nil {
				was = followed.String()
			}
			return fmt.Errorf("%w (task %q: cycle %s followed %s, the map from %s gives other ranges): give a start after the shard's last cycle, or the ranges that cycle followed",
				ErrShardMapLate, task, c.start.UTC().Format(time.RFC3339), was, from.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// LatestPlan returns the plan id and start of the task's latest cycle on
// this shard; false when it has made none.
func (l Ledger) LatestPlan(ctx context.Context, q Queryer, task string) (string, time.Time, bool, error) {
	var (
		plan  string
		start time.Time
	)
	err := q.QueryRow(ctx, "SELECT plan, cycle_start FROM "+l.table+" WHERE task = $1 AND slot = $2 ORDER BY cycle_start DESC LIMIT 1", task, BootstrapSlot).Scan(&plan, &start)
	switch {
	case errors.Is(err, pgx.ErrNoRows), isUndefinedTable(err):
		return "", time.Time{}, false, nil
	case err != nil:
		return "", time.Time{}, false, wrap(err, "reading the task's latest cycle")
	}
	return plan, start.UTC(), true, nil
}
