package riverslot_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

// shardNode runs a node of shard on schema for task (its River client
// works bootstraps and per-slot jobs) and makes the task's cycle an hour
// ahead: TestShardRefusesWithoutMap and TestShardJoinedServesNone.
func shardNode(ctx context.Context, t *testing.T, pool *pgxpool.Pool, task, shard, schema string) (*riverslot.Scheduler, time.Time) {
	t.Helper()
	noop := func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 20)
	s, err := riverslot.New(pool, &riverslot.Config{Shard: shard, Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
		{Name: task, Cycle: 24 * time.Second, Schema: schema, Table: "accounts", Sync: noop}, // 8 slots
	}})
	require.NoError(t, err)
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
	return s, ahead
}

// TestShardRefusesWithoutMap (issue 39 §2): a node that names its shard,
// on a database holding no shard map of the task, refuses (cancels) the
// cycle's bootstrap, saying that the fleet's first map must come first,
// and makes no slot (it used to serve every slot, twice with the other
// shards).
func TestShardRefusesWithoutMap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	const task = "transactions"
	nomap := riverslottest.Schema(ctx, t, pool)
	shardNode(ctx, t, pool, task, "b", nomap)
	jobs := pgx.Identifier{nomap, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "the refused bootstrap", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_bootstrap' AND state IN ('cancelled', 'completed', 'discarded')") == 1
	})
	require.EqualValues(t, 1, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_bootstrap' AND state = 'cancelled'"+
		" AND errors::text LIKE '%this node names shard%but this database holds no shard map of the task%A fleet''s first map must exist before its first sharded cycle%'"), "cancelled, saying why")
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot'"), "no slot served without a map")
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pgx.Identifier{nomap, ledger.Table}.Sanitize()+" WHERE task = $1", task), "the refused cycle is not recorded")
}

// TestShardJoinedServesNone (issue 39 §2): a shard that joined the fleet
// (its database holds the map) but owns no bucket in the map in force
// makes the cycle with none of its slots (it used to fail the
// bootstrap), which its status and history show as served elsewhere, not
// missing.
func TestShardJoinedServesNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	const task = "transactions"
	// Shard c joined the fleet of a and b (its database holds the map)
	// and owns no bucket yet: its cycle is made, with no slot.
	joined := riverslottest.Schema(ctx, t, pool)
	m := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "a", Lo: 0, Hi: 32767}, {Shard: "b", Lo: 32768, Hi: 65535}}}
	require.NoError(t, riverslot.SetShardMap(ctx, []riverslot.Shard{
		{Name: "a", Pool: pool, Schema: riverslottest.Schema(ctx, t, pool)},
		{Name: "b", Pool: pool, Schema: riverslottest.Schema(ctx, t, pool)},
		{Name: "c", Pool: pool, Schema: joined},
	}, task, m, time.Time{}))
	c, ahead := shardNode(ctx, t, pool, task, "c", joined)
	jobs := pgx.Identifier{joined, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "the joined shard's bootstrap", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_bootstrap' AND state = 'completed'") == 1
	})
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot'"), "c serves no slot")
	var (
		shard   string
		version int64
	)
	require.NoError(t, pool.QueryRow(ctx, "SELECT shard, shard_version FROM "+pgx.Identifier{joined, ledger.Table}.Sanitize()+" WHERE slot = -1").Scan(&shard, &version))
	require.Equal(t, "c", shard)
	require.EqualValues(t, 1, version)
	st, err := c.StatusAt(ctx, task, ahead)
	require.NoError(t, err)
	require.Equal(t, 8, st.Current.SlotsElsewhere)
	require.True(t, st.Current.OnTrack, st.Current.Verdict)
	history, err := c.Cycles(ctx, task, 0)
	require.NoError(t, err)
	require.Len(t, history, 1)
	require.Equal(t, 8, history[0].SlotsElsewhere)
	require.Empty(t, history[0].MissingSlots)
	require.Zero(t, history[0].Missed)
}

// fleetShard is one shard of a movedFleet: its database (a
// schema) and its Scheduler, configured.
type fleetShard struct {
	ref   riverslot.Shard
	sched *riverslot.Scheduler
}

// recordServed records in sh's ledger a cycle its bootstrap made under
// map version, and the fan-outs of slots, each of which selected and
// enqueued accounts accounts, all synced.
func recordServed(ctx context.Context, t *testing.T, sh fleetShard, task, plan string, start time.Time, version int64, slots []int, accounts int64) {
	t.Helper()
	table := pgx.Identifier{sh.ref.Schema, ledger.Table}.Sanitize()
	_, err := sh.ref.Pool.Exec(ctx, "INSERT INTO "+table+" (task, cycle_start, plan, slot, shard, shard_version, placement, synced, cycle_end) VALUES ($1, $2, $3, -1, $4, $5, 'hash', $6, $7)",
		task, start, plan, sh.ref.Name, version, accounts*int64(len(slots)), start.Add(24*time.Second))
	require.NoError(t, err)
	for _, slot := range slots {
		_, err := sh.ref.Pool.Exec(ctx, "INSERT INTO "+table+" (task, cycle_start, plan, slot, job_id, started_at, finished_at, accounts, range_accounts, inserted, batches) VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $7, $7, 1)",
			task, start, plan, slot, 1000+slot, start.Add(time.Duration(slot)*3*time.Second), accounts)
		require.NoError(t, err)
	}
}

// movedFleet is a fleet of shards a, b and c (schemas here) of task,
// each with its configured Scheduler, where a and b made two past cycles,
// t0 under map v1 (a: buckets 0-32767, b the rest) and t1 under v2, which
// moved the slot-wide range of account id from a to b from t1 on; c holds
// no map yet.
type movedFleet struct {
	shards map[string]fleetShard
	scheds []*riverslot.Scheduler
	refs   []riverslot.Shard
	info   riverslot.TaskInfo
	v1, v2 riverslot.ShardMap
	t0, t1 time.Time
	id     uuid.UUID
}

func newMovedFleet(ctx context.Context, t *testing.T, task string) *movedFleet {
	t.Helper()
	pool := riverslottest.Pool(t)
	noop := func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	f := &movedFleet{shards: map[string]fleetShard{}}
	for _, name := range []string{"a", "b", "c"} {
		schema := riverslottest.Schema(ctx, t, pool)
		riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)
		s, err := riverslot.New(pool, &riverslot.Config{Shard: name, Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
			{Name: task, Cycle: 24 * time.Second, Schema: schema, Table: "accounts", Sync: noop}, // 8 slots
		}})
		require.NoError(t, err)
		require.NoError(t, s.Configure(&river.Config{Schema: schema}))
		f.shards[name] = fleetShard{ref: riverslot.Shard{Name: name, Pool: pool, Schema: schema}, sched: s}
		f.refs, f.scheds = append(f.refs, f.shards[name].ref), append(f.scheds, s)
	}
	var err error
	f.info, err = f.shards["a"].sched.Task(task)
	require.NoError(t, err)
	// An account of a's half, and the slot-wide range holding it.
	for f.id = uuid.New(); slotplan.BucketOf(f.id, slotplan.BucketsTwoByte) > 32767; f.id = uuid.New() {
	}
	width := slotplan.BucketsTwoByte / f.info.Plan.Slots
	lo := slotplan.BucketOf(f.id, slotplan.BucketsTwoByte) / width * width
	f.v1 = riverslot.ShardMap{Version: 1, Ranges: []riverslot.ShardRange{{Shard: "a", Lo: 0, Hi: 32767}, {Shard: "b", Lo: 32768, Hi: 65535}}}
	f.v2, err = f.v1.Move(lo, lo+width-1, "b")
	require.NoError(t, err)
	require.NoError(t, riverslot.SetShardMap(ctx, f.refs[:2], task, f.v1, time.Time{}))
	f.t0 = f.info.Schedule.Start(time.Now().Add(-10 * time.Minute))
	f.t1 = f.info.Schedule.Next(f.t0)
	// v2 from t1, written as MoveBuckets would have before t1.
	raw, err := json.Marshal(f.v2)
	require.NoError(t, err)
	for _, sh := range f.refs[:2] {
		_, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{sh.Schema, ledger.ShardsTable}.Sanitize()+" (task, version, effective_from, map) VALUES ($1, 2, $2, $3)", task, f.t1, raw)
		require.NoError(t, err)
	}
	slot := f.info.Plan.Shift(f.info.Plan.SlotOf(f.id), f.info.Shift)
	require.Equal(t, "a", f.v1.SlotOwner(f.info.Plan, f.info.Shift, slot))
	require.Equal(t, "b", f.v2.SlotOwner(f.info.Plan, f.info.Shift, slot))
	for _, c := range []struct {
		start   time.Time
		version int64
		m       riverslot.ShardMap
	}{{f.t0, 1, f.v1}, {f.t1, 2, f.v2}} {
		for _, name := range []string{"a", "b"} {
			recordServed(ctx, t, f.shards[name], task, f.info.PlanID, c.start, c.version, c.m.SlotsOf(f.info.Plan, f.info.Shift, name), 5)
		}
	}
	return f
}

// TestShardsHistoryMoved (issue 39 §3): after a slot's range moved from a
// to b between two cycles, each shard's history counts only its own
// slots, the others elsewhere, neither missing nor missed (a's second
// cycle used to miss the moved slot, and to count every slot of b as
// missing): the moved slot is counted once in each cycle, by the shard
// that served it.
func TestShardsHistoryMoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const task = "transactions"
	f := newMovedFleet(ctx, t, task)
	for _, name := range []string{"a", "b"} {
		history, err := f.shards[name].sched.Cycles(ctx, task, 0)
		require.NoError(t, err)
		require.Len(t, history, 2, name)
		for i, m := range []riverslot.ShardMap{f.v2, f.v1} { // newest first
			h := history[i]
			own := len(m.SlotsOf(f.info.Plan, f.info.Shift, name))
			require.Equal(t, 8-own, h.SlotsElsewhere, "%s %s", name, h.CycleStart)
			require.Equal(t, own, h.SlotsDone, "%s %s", name, h.CycleStart)
			require.Empty(t, h.MissingSlots, "%s %s", name, h.CycleStart)
			require.Zero(t, h.NotSelected, "%s %s", name, h.CycleStart)
			require.Zero(t, h.Missed, "%s %s", name, h.CycleStart)
			require.Equal(t, int64(5*own), h.Selected, "%s %s", name, h.CycleStart)
			require.InDelta(t, 1, h.Coverage, 1e-9, "%s %s", name, h.CycleStart)
			require.True(t, h.Finished, "%s %s", name, h.CycleStart)
		}
	}
}

// TestShardsAccountMoved (issue 39 §3): the account lookup over the
// shards reads each cycle's sync from the shard that served the account
// then: the map in force gives the moved account to b, its previous sync
// was a's (it used to read as missing on b).
func TestShardsAccountMoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const task = "transactions"
	f := newMovedFleet(ctx, t, task)
	acc, err := riverslot.AccountOnShards(ctx, task, f.id, f.scheds[:2]...)
	require.NoError(t, err)
	require.Equal(t, "b", acc.Shard)
	require.NotNil(t, acc.Account.Current)
	require.NotNil(t, acc.Account.Previous)
	require.Equal(t, "b", acc.CurrentShard)
	require.True(t, f.t1.Equal(acc.Account.Current.CycleStart))
	require.Equal(t, riverslot.SlotDone, acc.Account.Current.State)
	require.Equal(t, "a", acc.PreviousShard)
	require.True(t, f.t0.Equal(acc.Account.Previous.CycleStart))
	require.Equal(t, riverslot.SlotDone, acc.Account.Previous.State, "a served it in the cycle before the move")
}

// TestShardsStatusJoining (issue 39 §3): the fleet's status of a cycle
// does not count a shard that joins at a later cycle (no map in force in
// its database for this one, so its nodes refuse it) as serving every
// slot: it serves none (it used to conflict with every shard).
func TestShardsStatusJoining(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const task = "transactions"
	f := newMovedFleet(ctx, t, task)
	require.NoError(t, riverslot.SetShardMap(ctx, f.refs, task, riverslot.ShardMap{Ranges: f.v2.Ranges}, f.info.Schedule.Next(time.Now().Add(time.Hour))))
	st, err := riverslot.StatusShardsWithOpts(ctx, task, &riverslot.StatusShardsOpts{FromLedger: true}, f.scheds...)
	require.NoError(t, err)
	require.True(t, f.t1.Equal(st.CycleStart))
	require.Empty(t, st.Conflicts)
	require.Empty(t, st.Unserved)
	require.Empty(t, st.MapVersions)
	require.Equal(t, 8, st.Slots)
	owners := st.SlotShards()
	for i := range owners {
		require.Equal(t, f.v2.SlotOwner(f.info.Plan, f.info.Shift, i), owners[i], "slot %d", i)
	}
	require.Equal(t, "c", st.Shards[2].Shard)
	require.NotNil(t, st.Shards[2].Status)
	require.Equal(t, 8, st.Shards[2].Status.SlotsElsewhere)
	require.Zero(t, st.Shards[2].Status.AccountsExpected)
	require.EqualValues(t, 40, st.Synced, "every slot once")
	require.True(t, st.OnTrack, st.Verdict)
}
