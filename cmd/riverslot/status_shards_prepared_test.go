package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/failedslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatusShardsRunningCycleFailsBesidePrepared: riverslot status
// --shard over a fleet of two shards (a serves every slot, b joined and
// serves none) whose cycle running now failed at a's slot 0 (every sync
// insert raises, its per-slot job cancelled), the next cycle prepared
// ahead of its start on both with EnqueueCycle: it describes the running
// cycle, --json and the view, and exits 1 on a's failed slot. Before the
// fix it described the prepared cycle, on track on both, and exited 0.
func TestStatusShardsRunningCycleFailsBesidePrepared(t *testing.T) {
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
	require.NoError(t, riverslot.SetShardMap(ctx, refs, task, riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "a", Lo: 0, Hi: 65535}}}, time.Time{}))
	newShard := func(name, schema string) *riverslot.Scheduler {
		s, err := riverslot.New(pool, &riverslot.Config{Shard: name, Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
			Name: task, Cycle: cycle, TriggerOffset: time.Duration(running.UnixNano() % int64(cycle)), Schema: schema, Table: "accounts",
			Queue: "parked", ControlQueue: river.QueueDefault,
			Sync: func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil },
		}}})
		require.NoError(t, err)
		return s
	}
	// a: both cycles, every slot its own, slot 0 of the running one failed.
	failedslot.Bootstrap(ctx, t, pool, refs[0].Schema, newShard("a", refs[0].Schema), running, next)
	// b: both cycles, no slot of them.
	b := newShard("b", refs[1].Schema)
	riverslottest.CreateAccounts(ctx, t, pool, refs[1].Schema, "accounts", 20)
	config := &river.Config{Schema: refs[1].Schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, b.Configure(config))
	config.PeriodicJobs = nil
	client, _ := riverslottest.StartClient(ctx, t, pool, config)
	for _, start := range []time.Time{running, next} {
		_, err := b.EnqueueCycle(ctx, client, task, start)
		require.NoError(t, err)
	}
	jobs := pgx.Identifier{refs[1].Schema, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "b's bootstraps of both cycles", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_bootstrap' AND state = 'completed'") == 2
	})

	args := []string{"status", "--task", task}
	for _, ref := range refs {
		args = append(args, "--shard", ref.Name+"@"+ref.Schema+"="+riverslottest.DatabaseURL())
	}
	code, stdout, stderr := runCmd(t, append(args, "--json")...)
	require.Equal(t, 1, code, "a's running cycle fails: stdout:\n%s\nstderr:\n%s", stdout, stderr)
	var st struct {
		CycleStart string `json:"cycle_start"`
		OnTrack    bool   `json:"on_track"`
		Verdict    string `json:"verdict"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
	require.Equal(t, running.Format(time.RFC3339), st.CycleStart, "the running cycle")
	require.False(t, st.OnTrack)
	require.True(t, strings.HasPrefix(st.Verdict, "1 of 2 shards not on track (a: failed slot 0: "), st.Verdict)

	code, stdout, stderr = runCmd(t, args...)
	require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "task transactions, cycle "+running.Format(time.RFC3339)+" over 2 shards")
	require.Contains(t, stdout, "verdict: 1 of 2 shards not on track (a: failed slot 0: ")
}
