package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestDemoShards runs riverslot demo --shards over three shards (three
// schemas of the test database: each shard its own River, ledger and
// accounts) for two 16 s cycles: the shards' bucket ranges cover the
// 65,536 buckets in order, each shard holds only the accounts of its
// ranges, every account is synced exactly once a cycle by its shard, and
// the total is the sum of the shards.
func TestDemoShards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := newDemoSchemaName(t, pool)
	for i := 1; i <= 3; i++ {
		s := fmt.Sprintf("%s_s%d", schema, i)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
		})
	}
	url := riverslottest.DatabaseURL()
	const accounts, cycles = 600, 2
	code, stdout, stderr := runCmd(t, "demo", "--database-url", url, "--shards", strings.Join([]string{url, url, url}, ","),
		"--schema", schema, "--accounts", fmt.Sprint(accounts), "--cycle", "16s", "--cycles", fmt.Sprint(cycles), "--workers", "10", "--json")
	require.Equal(t, 0, code, "stderr:\n%s", stderr)
	var s demoShardsSummary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s), stdout)
	require.Len(t, s.Shards, 3)
	next := 0
	var total int64
	for _, sh := range s.Shards {
		var lo, hi int
		_, err := fmt.Sscanf(sh.Ranges, "%d-%d", &lo, &hi)
		require.NoError(t, err)
		require.Equal(t, next, lo, "shard %s's range follows the one before", sh.Shard)
		next = hi + 1
		require.EqualValues(t, sh.Accounts*cycles, sh.SyncedOnce, "shard %s: every account once a cycle", sh.Shard)
		require.Zero(t, sh.Missed+sh.Duplicated, sh.Shard)
		total += sh.Accounts
		// The shard's table holds only accounts of its buckets.
		var outside int64
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{sh.Schema, "accounts"}.Sanitize()+
			" WHERE (get_byte(uuid_send(id), 15) * 256 + get_byte(uuid_send(id), 14)) NOT BETWEEN $1 AND $2", lo, hi).Scan(&outside))
		require.Zero(t, outside, sh.Shard)
	}
	require.Equal(t, 65536, next, "the ranges cover every bucket")
	require.EqualValues(t, accounts, total)
	require.EqualValues(t, accounts, s.All.Accounts)
	require.EqualValues(t, accounts*cycles, s.All.SyncedOnce)
	require.True(t, strings.HasPrefix(s.Map, "v1 s1:0-"), s.Map)
}
