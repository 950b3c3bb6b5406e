package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestShardsCommand: riverslot shards set writes the first map to two
// shards (schemas here, databases in production), show reads it back from
// both, move gives a range to the other
// shard from a later cycle; a change that fails part-way is undone; bad
// input is refused before any write.
func TestShardsCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	a, b := riverslottest.Schema(ctx, t, pool), riverslottest.Schema(ctx, t, pool)
	url := riverslottest.DatabaseURL()
	shards := []string{"--shard", "a@" + a + "=" + url, "--shard", "b@" + b + "=" + url}
	cmd := func(args ...string) (int, string, string) {
		return runCmd(t, append(append([]string{"shards"}, args...), shards...)...)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "--task", "t", "--ranges", "a:0-100"}, "buckets 101-65535 belong to no shard"},
		{[]string{"set", "--task", "t", "--ranges", "a:0-9999/b:10000-65535", "--cycle", "24s"}, "move its bound 10000 to 8192 or 16384"},
		{[]string{"set", "--task", "t", "--ranges", "a:0-32767/c:32768-65535"}, `names shard "c", which is not among the shards given`},
		{[]string{"move", "--task", "t", "--range", "0-10", "--to", "b"}, "move needs --at"},
		{[]string{"show", "--task", "bad name"}, "--task"},
	} {
		code, _, stderr := cmd(tt.args...)
		require.NotZero(t, code, "%v", tt.args)
		require.Contains(t, stderr, tt.want, tt.args)
	}

	code, stdout, stderr := cmd("set", "--task", "t", "--ranges", "a:0-32767/b:32768-65535", "--cycle", "24s")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "shard map v1 a:0-32767 b:32768-65535 on 2 shards, for every cycle")

	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	code, stdout, stderr = cmd("move", "--task", "t", "--range", "0-8191", "--to", "b", "--at", at.Format(time.RFC3339))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "shard map v2 b:0-8191,32768-65535 a:8192-32767 on 2 shards, for the cycles from "+at.Format(time.RFC3339))

	code, stdout, stderr = cmd("show", "--task", "t", "--json")
	require.Equal(t, 0, code, stderr)
	var out struct {
		Shards []struct {
			Shard      string `json:"shard"`
			MapVersion int64  `json:"map_version"`
		} `json:"shards"`
		Agree bool `json:"maps_agree"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.True(t, out.Agree)
	require.Len(t, out.Shards, 2)
	for _, s := range out.Shards {
		require.EqualValues(t, 2, s.MapVersion, s.Shard)
	}
	// A change that fails part-way (shard a's schema named for b too: the
	// second write finds the first) is undone: the shards still agree.
	code, _, stderr = runCmd(t, "shards", "move", "--task", "t", "--range", "0-8191", "--to", "a", "--at", at.Add(time.Hour).Format(time.RFC3339),
		"--shard", "a@"+a+"="+url, "--shard", "b@"+a+"="+url)
	require.Equal(t, 1, code, "the same schema named twice: b's write fails, a's is undone: %s", stderr)
	code, _, stderr = cmd("show", "--task", "t")
	require.Equal(t, 0, code, "a's change was undone: %s", stderr)
}
