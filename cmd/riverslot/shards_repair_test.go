package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

// recordCycle records in a shard's ledger the bootstrap of task's cycle at
// start under a 24 s plan (8 slots), following shard map version, as a
// bootstrap (or EnqueueCycle ahead) does.
func recordCycle(ctx context.Context, t *testing.T, schema, shard, task string, start time.Time, version int64) {
	t.Helper()
	plan, err := slotplan.New(24 * time.Second)
	require.NoError(t, err)
	_, err = riverslottest.Pool(t).Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, ledger.Table}.Sanitize()+" (task, cycle_start, plan, slot, shard, shard_version) VALUES ($1, $2, $3, -1, $4, $5)",
		task, start, taskspec.KeyOf(plan, 1, 0).String(), shard, version)
	require.NoError(t, err)
}

// TestShardsAddDocumented: docs/shards.md's "Adding a shard to a running
// fleet" as an operator runs it, s1 and s2 running (each has made a
// cycle): riverslot migrate prepares the new database, shards add joins it
// at a cycle start ahead, shards move gives it a range from a later one
// (a range off the task's slots, known from the ledger, is refused naming
// the nearest bounds), and shards show finds the maps agreeing. set
// accepts a new shard as add does.
func TestShardsAddDocumented(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	s1, s2 := riverslottest.Schema(ctx, t, pool), riverslottest.Schema(ctx, t, pool)
	s3, s4 := riverslottest.EmptySchema(ctx, t, pool), riverslottest.EmptySchema(ctx, t, pool)
	url := riverslottest.DatabaseURL()
	fleet := []string{"--shard", "s1@" + s1 + "=" + url, "--shard", "s2@" + s2 + "=" + url}
	cmd := func(args []string, shards ...string) (int, string, string) {
		return runCmd(t, append(append([]string{"shards"}, args...), shards...)...)
	}
	code, _, stderr := cmd([]string{"set", "--task", "t", "--ranges", "s1:0-32767/s2:32768-65535", "--cycle", "24s"}, fleet...)
	require.Equal(t, 0, code, stderr)
	now := time.Now().UTC().Truncate(time.Minute)
	recordCycle(ctx, t, s1, "s1", "t", now, 1)
	recordCycle(ctx, t, s2, "s2", "t", now, 1)

	// 1. Prepare the new database.
	code, _, stderr = runCmd(t, "migrate", "--database-url", url, "--schema", s3)
	require.Equal(t, 0, code, stderr)
	// 2. Join it at a cycle start ahead: nothing moves.
	withS3 := append(fleet, "--shard", "s3@"+s3+"="+url)
	at := now.Add(time.Hour)
	code, stdout, stderr := cmd([]string{"add", "--task", "t", "--at", at.Format(time.RFC3339)}, withS3...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "shard map v2 s1:0-32767 s2:32768-65535 on 3 shards, for the cycles from "+at.Format(time.RFC3339))
	require.Contains(t, stdout, "joined: s3")
	code, _, stderr = cmd([]string{"add", "--task", "t", "--at", at.Add(time.Hour).Format(time.RFC3339)}, withS3...)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "add joins a new shard, one holding none")

	// 5. Give it a range from a later cycle start: off the slots of the
	// task's plan (its ledger's), refused; on them, written.
	at2 := at.Add(time.Hour)
	code, _, stderr = cmd([]string{"move", "--task", "t", "--range", "0-4095", "--to", "s3", "--at", at2.Format(time.RFC3339)}, withS3...)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "move its bound 4096 to 0 or 8192")
	code, stdout, stderr = cmd([]string{"move", "--task", "t", "--range", "0-8191", "--to", "s3", "--at", at2.Format(time.RFC3339)}, withS3...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "shard map v3 s3:0-8191 s1:8192-32767 s2:32768-65535 on 3 shards")
	code, _, stderr = cmd([]string{"show", "--task", "t"}, withS3...)
	require.Equal(t, 0, code, stderr)

	// set takes a new shard too: s4 joins with the ranges as they are.
	code, _, stderr = runCmd(t, "migrate", "--database-url", url, "--schema", s4)
	require.Equal(t, 0, code, stderr)
	withS4 := append(withS3, "--shard", "s4@"+s4+"="+url)
	code, stdout, stderr = cmd([]string{"set", "--task", "t", "--ranges", "s3:0-8191/s1:8192-32767/s2:32768-65535", "--at", at2.Add(time.Hour).Format(time.RFC3339)}, withS4...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "shard map v4")
	require.Contains(t, stdout, "joined: s4")
	code, _, stderr = cmd([]string{"show", "--task", "t"}, withS4...)
	require.Equal(t, 0, code, stderr)
}

// TestShardsHalfWrittenChange: a move whose second shard's write fails on
// purpose (a bootstrap holds b's shard-map lock until the 30 s lead has
// passed: the lead is checked on each shard as it is written) and whose
// undo on a fails too (a has made a cycle under the new version) leaves
// the maps disagreeing; shards show names the shards and their versions
// and exits 1, a change is refused, and shards repair brings both shards
// to one map.
func TestShardsHalfWrittenChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	a, b := riverslottest.Schema(ctx, t, pool), riverslottest.Schema(ctx, t, pool)
	url := riverslottest.DatabaseURL()
	flags := []string{"--shard", "a@" + a + "=" + url, "--shard", "b@" + b + "=" + url}
	cmd := func(args ...string) (int, string, string) {
		return runCmd(t, append(append([]string{"shards"}, args...), flags...)...)
	}
	code, _, stderr := cmd("set", "--task", "t", "--ranges", "a:0-32767/b:32768-65535")
	require.Equal(t, 0, code, stderr)
	shards := []riverslot.Shard{{Name: "a", Pool: pool, Schema: a}, {Name: "b", Pool: pool, Schema: b}}

	// A bootstrap on b holds its shard-map lock (shared) as the move runs:
	// a (losing buckets) is written first, b waits.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	require.NoError(t, ledger.New(b).LockShards(ctx, tx, "t", false))
	// 6 s beyond the lead: a's write must find from at least the lead
	// ahead (with 2 s a CI run under -race, load average 18, took longer
	// to get there, and a's write was refused).
	from := time.Now().Add(riverslot.ShardMapLeadMin + 6*time.Second).UTC().Truncate(time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := riverslot.MoveBuckets(ctx, shards, "t", 0, 8191, "b", from)
		done <- err
	}()
	riverslottest.WaitFor(t, 20*time.Second, "a's write", func() bool {
		select {
		case err := <-done: // a move that ended before b's lock freed: a's write was refused
			require.FailNow(t, "the move ended while b's map lock was held", "%v", err)
		default:
		}
		cur, _, err := riverslot.ShardMapOf(ctx, shards[0], "t")
		return err == nil && cur.Version == 2
	})
	// a makes the cycle at from under version 2 (ahead, as EnqueueCycle
	// does): the undo there is refused.
	recordCycle(ctx, t, a, "a", "t", from, 2)
	riverslottest.WaitFor(t, 20*time.Second, "the lead to pass", func() bool { return time.Until(from) < riverslot.ShardMapLeadMin })
	require.NoError(t, tx.Rollback(ctx))
	err = <-done
	require.ErrorIs(t, err, riverslot.ErrShardMapsDisagree)
	require.ErrorContains(t, err, `shard "b": the shard map must take effect at least 30s from now as each shard is written`)
	require.ErrorContains(t, err, `undoing it on shard "a"`)
	require.ErrorContains(t, err, "hold version 2")

	code, _, stderr = cmd("show", "--task", "t")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "a: v2 b:0-8191,32768-65535 a:8192-32767 from "+from.Format(time.RFC3339)+"; b: v1 a:0-32767 b:32768-65535 from every cycle")
	require.Contains(t, stderr, "riverslot shards repair")
	code, _, stderr = cmd("move", "--task", "t", "--range", "0-8191", "--to", "a", "--at", from.Add(2*time.Hour).Format(time.RFC3339))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "riverslot shards repair")

	// The highest version's start has come too near: repair asks for --at.
	code, _, stderr = cmd("repair", "--task", "t")
	require.NotZero(t, code)
	require.Contains(t, stderr, "riverslot shards repair --at")
	later := from.Add(time.Hour)
	code, stdout, stderr := cmd("repair", "--task", "t", "--at", later.Format(time.RFC3339))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "repaired: shard map v3 b:0-8191,32768-65535 a:8192-32767 on 2 shards, for the cycles from "+later.Format(time.RFC3339))
	code, _, stderr = cmd("show", "--task", "t")
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr = cmd("repair", "--task", "t")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "nothing to repair")
}
