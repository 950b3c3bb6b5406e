package riverslot_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestSetShardMap: two shards (schemas here; databases in production) get
// the same versions of a task's map; a change too soon, naming a shard not
// given, or for a cycle a shard has made already is refused, and the
// shards written before the refusal are undone; shards whose maps
// disagree are refused; a move reads back on every shard, the old map
// still in force before its start.
func TestSetShardMap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	var shards []riverslot.Shard
	for _, name := range []string{"a", "b"} {
		shards = append(shards, riverslot.Shard{Name: name, Pool: pool, Schema: riverslottest.Schema(ctx, t, pool)})
	}
	const task = "transactions"
	m := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "a", Lo: 0, Hi: 32767}, {Shard: "b", Lo: 32768, Hi: 65535}}}
	require.NoError(t, riverslot.SetShardMap(ctx, shards, task, m, time.Time{}))
	versions := func() []int64 {
		var out []int64
		for _, s := range shards {
			cur, ok, err := riverslot.ShardMapOf(ctx, s, task)
			require.NoError(t, err)
			require.True(t, ok)
			out = append(out, cur.Version)
		}
		return out
	}
	require.Equal(t, []int64{1, 1}, versions())

	_, err := riverslot.MoveBuckets(ctx, shards, task, 0, 8191, "b", time.Now().Add(time.Second))
	require.ErrorContains(t, err, "at least 30s from now")
	bad := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "a", Lo: 0, Hi: 32767}, {Shard: "c", Lo: 32768, Hi: 65535}}}
	require.ErrorContains(t, riverslot.SetShardMap(ctx, shards, task, bad, time.Now().Add(time.Hour)), `names shard "c", which is not among the shards given`)

	// Shard b has made a cycle two hours ahead (EnqueueCycle makes cycles
	// ahead): a change from one hour ahead would change it. a loses
	// buckets and is written first, then undone.
	from := time.Now().Add(time.Hour).Truncate(time.Minute)
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{shards[1].Schema, ledger.Table}.Sanitize()+" (task, cycle_start, plan, slot) VALUES ($1, $2, 'x', -1)",
		task, from.Add(time.Hour))
	require.NoError(t, err)
	_, err = riverslot.MoveBuckets(ctx, shards, task, 0, 8191, "b", from)
	require.ErrorIs(t, err, ledger.ErrShardMapLate)
	require.ErrorContains(t, err, `shard "b"`)
	require.Equal(t, []int64{1, 1}, versions(), "a's copy was undone")

	// After b's cycle: written on both, in force from its start.
	later := from.Add(2 * time.Hour)
	next, err := riverslot.MoveBuckets(ctx, shards, task, 0, 8191, "b", later)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 2}, versions())
	for _, s := range shards {
		before, ok, err := riverslot.ShardMapAt(ctx, s, task, later.Add(-time.Second))
		require.NoError(t, err)
		require.True(t, ok)
		require.EqualValues(t, 1, before.Version)
		require.Equal(t, "a", before.Owner(0))
		at, _, err := riverslot.ShardMapAt(ctx, s, task, later)
		require.NoError(t, err)
		require.Equal(t, next.Ranges, at.Ranges)
		require.Equal(t, "b", at.Owner(0))
	}

	// A change made on one shard only (by hand here): the maps disagree.
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{shards[0].Schema, ledger.ShardsTable}.Sanitize()+
		" (task, version, effective_from, map) SELECT task, 3, effective_from + interval '1 hour', map FROM "+
		pgx.Identifier{shards[0].Schema, ledger.ShardsTable}.Sanitize()+" WHERE task = $1 AND version = 2", task)
	require.NoError(t, err)
	_, err = riverslot.MoveBuckets(ctx, shards, task, 0, 8191, "a", later.Add(2*time.Hour))
	require.ErrorContains(t, err, "disagree")
}

// TestShardBootstrap: a sharded task's bootstrap makes per-slot jobs for
// its shard's slots only, records the shard and the map's version, and
// Status shows the other slots as elsewhere; a node that names no shard
// fails the bootstrap, saying which setting to give, and a task whose map
// is not in force yet at the cycle refuses it (it would serve every slot),
// saying why, as does a task with no map at all on the same node, which
// names its shard (TestShardRefusesWithoutMap).
func TestShardBootstrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 100)
	const (
		task  = "transactions"
		cycle = 24 * time.Second // 8 slots: 8,192 two-byte buckets each
	)
	// b's share: slots 2 to 4.
	m := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "a", Lo: 0, Hi: 16383}, {Shard: "b", Lo: 16384, Hi: 40959}, {Shard: "a", Lo: 40960, Hi: 65535}}}
	setMap := func(schema string) { // b is schema; a's database is elsewhere
		require.NoError(t, riverslot.SetShardMap(ctx, []riverslot.Shard{{Name: "a", Pool: pool, Schema: riverslottest.Schema(ctx, t, pool)}, {Name: "b", Pool: pool, Schema: schema}}, task, m, time.Time{}))
	}
	setMap(schema)
	noop := func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	newScheduler := func(shard, schema string) *riverslot.Scheduler {
		s, err := riverslot.New(pool, &riverslot.Config{Shard: shard, Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
			{Name: task, Cycle: cycle, Schema: schema, Table: "accounts", Sync: noop},
		}})
		require.NoError(t, err)
		return s
	}
	s := newScheduler("b", schema)
	require.NoError(t, s.CreateIndexes(ctx))
	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, s.Configure(config))
	config.PeriodicJobs = nil
	client, _ := riverslottest.StartClient(ctx, t, pool, config)

	info, err := s.Task(task)
	require.NoError(t, err)
	ahead := info.Schedule.Next(time.Now().Add(time.Hour))
	_, err = s.EnqueueCycle(ctx, client, task, ahead)
	require.NoError(t, err)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "the bootstrap", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_bootstrap' AND state = 'completed'") == 1
	})
	rows, err := pool.Query(ctx, "SELECT (args->>'slot')::int FROM "+jobs+" WHERE kind = 'riverslot_perslot' ORDER BY 1")
	require.NoError(t, err)
	slots, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{2, 3, 4}, slots, "the slots of b's buckets")
	var (
		shard   string
		version int64
	)
	require.NoError(t, pool.QueryRow(ctx, "SELECT shard, shard_version FROM "+pgx.Identifier{schema, ledger.Table}.Sanitize()+" WHERE slot = -1").Scan(&shard, &version))
	require.Equal(t, "b", shard)
	require.EqualValues(t, 1, version)
	st, err := s.StatusAt(ctx, task, ahead)
	require.NoError(t, err)
	require.Equal(t, "b", st.Current.Shard)
	require.Equal(t, 5, st.Current.SlotsElsewhere)
	for _, p := range st.Current.PerSlot {
		if p.Slot >= 2 && p.Slot <= 4 {
			require.Equal(t, riverslot.SlotScheduled, p.State)
		} else {
			require.Equal(t, riverslot.SlotElsewhere, p.State)
			require.Zero(t, p.Expected)
		}
	}

	// A node that names no shard, on another database of shard b: its
	// bootstrap fails, saying what to set, and makes no slot.
	other := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, other, "accounts", 10)
	setMap(other)
	unnamed := newScheduler("", other)
	require.NoError(t, unnamed.CreateIndexes(ctx))
	config2 := &river.Config{Schema: other, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, unnamed.Configure(config2))
	config2.PeriodicJobs = nil
	client2, _ := riverslottest.StartClient(ctx, t, pool, config2)
	_, err = unnamed.EnqueueCycle(ctx, client2, task, ahead)
	require.NoError(t, err)
	jobs2 := pgx.Identifier{other, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "the failed bootstrap attempt", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs2+" WHERE kind = 'riverslot_bootstrap' AND errors::text LIKE '%set riverslot.Config.Shard%'") == 1
	})
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs2+" WHERE kind = 'riverslot_perslot'"), "no slot made by the unnamed node")

	// A node that names a shard, on a database whose map for the task is
	// in force only from a later cycle: it would serve every slot (twice,
	// with the other shards); its bootstrap is cancelled, saying why, and
	// makes no slot. A second task of the same node, with no map at all,
	// is refused too: the node names its shard.
	nomap := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, nomap, "accounts", 10)
	require.NoError(t, riverslot.SetShardMap(ctx, []riverslot.Shard{{Name: "a", Pool: pool, Schema: riverslottest.Schema(ctx, t, pool)}, {Name: "b", Pool: pool, Schema: nomap}},
		task, m, ahead.Add(10*cycle)))
	s3, err := riverslot.New(pool, &riverslot.Config{Shard: "b", Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
		{Name: task, Cycle: cycle, Schema: nomap, Table: "accounts", Sync: noop},
		{Name: "unsharded", Cycle: cycle, Schema: nomap, Table: "accounts", Sync: noop},
	}})
	require.NoError(t, err)
	require.NoError(t, s3.CreateIndexes(ctx))
	config3 := &river.Config{Schema: nomap, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, s3.Configure(config3))
	config3.PeriodicJobs = nil
	client3, _ := riverslottest.StartClient(ctx, t, pool, config3)
	for _, name := range []string{task, "unsharded"} {
		_, err = s3.EnqueueCycle(ctx, client3, name, ahead)
		require.NoError(t, err)
	}
	jobs3 := pgx.Identifier{nomap, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "the refused bootstraps", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs3+" WHERE kind = 'riverslot_bootstrap' AND args->>'task' = $1 AND state = 'cancelled' AND errors::text LIKE '%none in force%'", task) == 1 &&
			riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs3+" WHERE kind = 'riverslot_bootstrap' AND args->>'task' = 'unsharded' AND state = 'cancelled' AND errors::text LIKE '%holds no shard map%'") == 1
	})
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs3+" WHERE kind = 'riverslot_perslot' AND args->>'task' = $1", task), "no slot made without a map in force")
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs3+" WHERE kind = 'riverslot_perslot' AND args->>'task' = 'unsharded'"), "no map on a node that names its shard: no slot")
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pgx.Identifier{nomap, ledger.Table}.Sanitize()+" WHERE task = $1", task), "the refused cycle is not recorded")
}
