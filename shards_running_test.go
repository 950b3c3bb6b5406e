package riverslot_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatusShardsRunningCycleBesidePrepared: a fleet of two shards (a
// serves slots 0-7, b 8-15) runs the cycle that started a minute ago, in
// which a's slot 0 failed (every sync insert raises; its per-slot job
// cancelled), and each shard has bootstrapped the next cycle ahead of its
// start with EnqueueCycle. StatusShards (riverslot status --shard, whose
// exit code is its OnTrack) and StatusShardsWithOpts with FromLedger (the
// fleet's page) describe each shard's running cycle: a's failed slot 0
// keeps the fleet off track. AccountOnShards describes the account in the
// running cycle too. Before the fix they took the prepared cycle, on
// track on both shards: riverslot status --shard exited 0.
func TestStatusShardsRunningCycleBesidePrepared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	const (
		task  = "transactions"
		cycle = time.Hour // 16 slots of 225 s
	)
	running := time.Now().Add(-time.Minute).Truncate(time.Second).UTC()
	next := running.Add(cycle)
	refs := []riverslot.Shard{
		{Name: "a", Pool: pool, Schema: riverslottest.Schema(ctx, t, pool)},
		{Name: "b", Pool: pool, Schema: riverslottest.Schema(ctx, t, pool)},
	}
	m := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "a", Lo: 0, Hi: 32767}, {Shard: "b", Lo: 32768, Hi: 65535}}}
	require.NoError(t, riverslot.SetShardMap(ctx, refs, task, m, time.Time{}))

	scheds := make([]*riverslot.Scheduler, len(refs))
	var info riverslot.TaskInfo
	for i, ref := range refs {
		s, err := riverslot.New(pool, &riverslot.Config{Shard: ref.Name, Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
			Name: task, Cycle: cycle, TriggerOffset: time.Duration(running.UnixNano() % int64(cycle)), Schema: ref.Schema, Table: "accounts",
			Queue: "parked", ControlQueue: river.QueueDefault, Sync: noopSync,
		}}})
		require.NoError(t, err)
		scheds[i] = s
		info, err = s.Task(task)
		require.NoError(t, err)
	}
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, m.SlotsOf(info.Plan, info.Shift, "a"))

	// Shard a: 20 accounts in bucket 0 (slot 0), whose sync inserts fail;
	// slot 0's fan-out runs at once in the running cycle, fails, and is
	// cancelled for good. Shard b: 20 accounts; its slots are to come.
	accounts := pgx.Identifier{refs[0].Schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)")
	require.NoError(t, err)
	var id uuid.UUID
	for range 20 {
		id = uuid.New()
		id[14], id[15] = 0, 0
		_, err := pool.Exec(ctx, "INSERT INTO "+accounts+" (id) VALUES ($1)", id)
		require.NoError(t, err)
	}
	failSyncInserts(ctx, t, pool, refs[0].Schema)
	riverslottest.CreateAccounts(ctx, t, pool, refs[1].Schema, "accounts", 20)
	clients := make([]*river.Client[pgx.Tx], len(refs))
	for i, ref := range refs {
		clients[i] = cyclesOnShard(ctx, t, pool, ref.Schema, scheds[i], task, 2*len(m.SlotsOf(info.Plan, info.Shift, ref.Name)), running, next)
	}
	cancelFailedSlotZero(ctx, t, pool, refs[0].Schema, clients[0], running)

	for _, tt := range []struct {
		name   string
		status func() (*riverslot.ShardsStatus, error)
	}{
		{"StatusShards", func() (*riverslot.ShardsStatus, error) { return riverslot.StatusShards(ctx, task, scheds...) }},
		{"FromLedger", func() (*riverslot.ShardsStatus, error) {
			return riverslot.StatusShardsWithOpts(ctx, task, &riverslot.StatusShardsOpts{FromLedger: true}, scheds...)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, err := tt.status()
			require.NoError(t, err)
			require.True(t, st.CycleStart.Equal(running), "the running cycle %s, got %s", running, st.CycleStart)
			require.False(t, st.OnTrack, st.Verdict)
			require.False(t, st.Starting, st.Verdict)
			require.Equal(t, 1, st.SlotsFailed)
			require.Len(t, st.Shards, 2)
			a, b := st.Shards[0], st.Shards[1]
			require.NotNil(t, a.Status, a.Error)
			require.True(t, a.Status.CycleStart.Equal(running))
			require.Equal(t, 0, a.Status.FailedSlot)
			require.True(t, strings.HasPrefix(a.Status.Verdict, "failed slot 0: "), a.Status.Verdict)
			require.NotNil(t, b.Status, b.Error)
			require.True(t, b.Status.CycleStart.Equal(running))
			require.True(t, b.Status.OnTrack, b.Status.Verdict)
			require.Equal(t, 8, b.Status.SlotsElsewhere)
			require.Empty(t, st.Conflicts)
			require.Empty(t, st.Unserved)
			require.True(t, strings.HasPrefix(st.Verdict, "1 of 2 shards not on track (a: failed slot 0: "), st.Verdict)
		})
	}

	acc, err := riverslot.AccountOnShards(ctx, task, id, scheds...)
	require.NoError(t, err)
	require.Equal(t, "a", acc.Shard)
	require.True(t, acc.Account.CycleStart.Equal(running), "the running cycle %s, got %s", running, acc.Account.CycleStart)
	require.NotNil(t, acc.Account.Current)
	require.True(t, acc.Account.Current.CycleStart.Equal(running))
	require.Equal(t, "a", acc.CurrentShard)
	require.Nil(t, acc.Account.Previous)

	// Before the fleet's first cycle starts, the latest prepared: a task
	// whose only cycle is an hour ahead, as Status shows it.
	ahead := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "a", Lo: 0, Hi: 65535}}}
	first := riverslottest.Schema(ctx, t, pool)
	require.NoError(t, riverslot.SetShardMap(ctx, []riverslot.Shard{{Name: "a", Pool: pool, Schema: first}}, task, ahead, time.Time{}))
	s, err := riverslot.New(pool, &riverslot.Config{Shard: "a", Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
		Name: task, Cycle: cycle, TriggerOffset: time.Duration(running.UnixNano() % int64(cycle)), Schema: first, Table: "accounts",
		Queue: "parked", ControlQueue: river.QueueDefault, Sync: noopSync,
	}}})
	require.NoError(t, err)
	riverslottest.CreateAccounts(ctx, t, pool, first, "accounts", 20)
	cyclesOnShard(ctx, t, pool, first, s, task, info.Plan.Slots, next)
	st, err := riverslot.StatusShards(ctx, task, s)
	require.NoError(t, err)
	require.True(t, st.CycleStart.Equal(next), "the prepared cycle %s, got %s", next, st.CycleStart)
	require.True(t, st.OnTrack, st.Verdict)
}

// failSyncInserts makes every insert of a sync job into schema's River
// table raise "sync inserts are broken": a real database error in the
// middle of a fan-out.
func failSyncInserts(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	fn := pgx.Identifier{schema, "fail_sync_inserts"}.Sanitize()
	_, err := pool.Exec(ctx, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'sync inserts are broken'; END $$;
		CREATE TRIGGER fail_sync_inserts BEFORE INSERT ON `+jobs+` FOR EACH ROW WHEN (NEW.kind = 'riverslot_sync') EXECUTE FUNCTION `+fn+`();`)
	require.NoError(t, err)
}

// cyclesOnShard bootstraps the task's cycles at starts on one shard's
// schema through EnqueueCycle and a River client that works the control
// queue, and waits for the perSlot per-slot jobs they make (the shard's
// slots, per cycle). It returns the client.
func cyclesOnShard(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, s *riverslot.Scheduler, task string, perSlot int, starts ...time.Time) *river.Client[pgx.Tx] {
	t.Helper()
	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, s.Configure(config))
	config.PeriodicJobs = nil // the test makes its cycles itself
	client, _ := riverslottest.StartClient(ctx, t, pool, config)
	for _, start := range starts {
		_, err := s.EnqueueCycle(ctx, client, task, start)
		require.NoError(t, err)
	}
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "the cycles' bootstraps and per-slot jobs", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_bootstrap' AND state = 'completed'") == int64(len(starts)) &&
			riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", perslot.Kind) == int64(perSlot)
	})
	return client
}

// cancelFailedSlotZero waits for slot 0's fan-out of the cycle at start
// to fail in schema, then cancels its per-slot job: the slot is failed
// for good.
func cancelFailedSlotZero(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, client *river.Client[pgx.Tx], start time.Time) {
	t.Helper()
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	var slot0 int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2 AND (args->>'slot')::int = 0",
		perslot.Kind, start).Scan(&slot0))
	riverslottest.WaitFor(t, 30*time.Second, "slot 0's fan-out to fail", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND cardinality(errors) > 0", slot0) == 1
	})
	_, err := client.JobCancel(ctx, slot0)
	require.NoError(t, err)
	riverslottest.WaitFor(t, 30*time.Second, "slot 0's per-slot job to be cancelled", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND state = 'cancelled'", slot0) == 1
	})
}
