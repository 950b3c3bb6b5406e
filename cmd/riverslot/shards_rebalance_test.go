package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// planMoves reads the MOVE table of rebalance's output: each move's range,
// from and to.
func planMoves(t *testing.T, out string) [][4]string {
	t.Helper()
	var moves [][4]string
	for _, m := range regexp.MustCompile(`(?m)^\d+ +(\d+)-(\d+) +\d+ +(\S+) +(\S+)$`).FindAllStringSubmatch(out, -1) {
		moves = append(moves, [4]string{m[1], m[2], m[3], m[4]})
	}
	return moves
}

// TestShardsRebalance: on a 3-shard uneven map over a 24 s cycle (8 slots
// of 8,192 buckets), rebalance --to-even --dry-run prints moves on slot
// bounds, each from the shard owning the range, whose result gives each
// shard 65,536 / 3 buckets within one slot (2 or 3 slots each), and writes
// nothing; with a weight of 2 for s1, s1 gets half; without --dry-run the
// map is written from --at and shards show prints it; a second rebalance
// finds it even. Bad input exits 2.
func TestShardsRebalance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	url := riverslottest.DatabaseURL()
	var flags []string
	for _, name := range []string{"s1", "s2", "s3"} {
		flags = append(flags, "--shard", name+"@"+riverslottest.Schema(ctx, t, pool)+"="+url)
	}
	cmd := func(args ...string) (int, string, string) {
		return runCmd(t, append(append([]string{"shards"}, args...), flags...)...)
	}
	// s1 5 slots, s2 2, s3 1.
	code, _, stderr := cmd("set", "--task", "t", "--ranges", "s1:0-40959/s2:40960-57343/s3:57344-65535", "--cycle", "24s")
	require.Equal(t, 0, code, stderr)

	const slot = 8192
	// apply runs the moves over the 8 slots' owners, by the definition of
	// a move: each of its slots was its from's, and is its to's.
	apply := func(owners []string, moves [][4]string) map[string]int {
		t.Helper()
		for _, mv := range moves {
			lo, err := strconv.Atoi(mv[0])
			require.NoError(t, err)
			hi, err := strconv.Atoi(mv[1])
			require.NoError(t, err)
			require.Zero(t, lo%slot, "on a slot bound: %v", mv)
			require.Zero(t, (hi+1)%slot, "on a slot bound: %v", mv)
			for s := lo / slot; s <= hi/slot; s++ {
				require.Equal(t, mv[2], owners[s], "move %v from the slot's owner", mv)
				owners[s] = mv[3]
			}
		}
		count := map[string]int{}
		for _, o := range owners {
			count[o]++
		}
		return count
	}
	uneven := func() []string { return []string{"s1", "s1", "s1", "s1", "s1", "s2", "s2", "s3"} }

	code, stdout, stderr := cmd("rebalance", "--task", "t", "--to-even", "--dry-run", "--cycle", "24s")
	require.Equal(t, 0, code, stderr)
	moves := planMoves(t, stdout)
	require.NotEmpty(t, moves, stdout)
	count := apply(uneven(), moves)
	for _, name := range []string{"s1", "s2", "s3"} {
		// 65,536 / 3 = 21,845.3 buckets: 2 or 3 slots of 8,192.
		require.Contains(t, []int{2, 3}, count[name], "%s: %s", name, stdout)
	}
	// Only s1 (above its share) gives, only its excess: 2 slots.
	require.Len(t, moves, 2, stdout)
	require.Regexp(t, `(?m)^s1 +1 +21845\.3 +40960 +24576$`, stdout)
	require.Contains(t, stdout, "dry run: nothing written")
	code, stdout, stderr = cmd("show", "--task", "t")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "v1 s1:0-40959 s2:40960-57343 s3:57344-65535", "the dry run wrote nothing")

	// Weighted: s1 2 of 4, half the buckets.
	code, stdout, stderr = cmd("rebalance", "--task", "t", "--to-even", "--weights", "s1=2", "--dry-run", "--cycle", "24s")
	require.Equal(t, 0, code, stderr)
	count = apply(uneven(), planMoves(t, stdout))
	require.Equal(t, map[string]int{"s1": 4, "s2": 2, "s3": 2}, count, stdout)

	// Written from --at.
	at := time.Now().UTC().Add(time.Hour).Truncate(time.Minute)
	code, stdout, stderr = cmd("rebalance", "--task", "t", "--to-even", "--at", at.Format(time.RFC3339), "--cycle", "24s")
	require.Equal(t, 0, code, stderr)
	newMap := regexp.MustCompile(`new map: v2 (.*)`).FindStringSubmatch(stdout)
	require.NotNil(t, newMap, stdout)
	require.Contains(t, stdout, "shard map v2 "+newMap[1]+" on 3 shards, for the cycles from "+at.Format(time.RFC3339))
	code, stdout, stderr = cmd("show", "--task", "t", "--json")
	require.Equal(t, 0, code, stderr)
	var out struct {
		Shards []struct {
			Map string `json:"map"`
		} `json:"shards"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Len(t, out.Shards, 3)
	for _, s := range out.Shards {
		require.Equal(t, "v2 "+newMap[1], s.Map)
	}
	// The written map is the dry run's result: every shard 2 or 3 slots.
	for _, part := range strings.Fields(newMap[1]) {
		name, ranges, _ := strings.Cut(part, ":")
		n := 0
		for _, r := range strings.Split(ranges, ",") {
			lo, hi, err := parseBucketRange(r)
			require.NoError(t, err)
			n += hi - lo + 1
		}
		require.Contains(t, []int{2 * slot, 3 * slot}, n, name)
	}
	code, stdout, stderr = cmd("rebalance", "--task", "t", "--to-even", "--dry-run", "--cycle", "24s")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "already even")

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"rebalance", "--task", "t", "--dry-run"}, "rebalance needs --to-even"},
		{[]string{"rebalance", "--task", "t", "--to-even"}, "rebalance needs --at"},
		{[]string{"rebalance", "--task", "t", "--to-even", "--dry-run", "--weights", "s9=1"}, `--weights "s9" is not among --shard`},
		{[]string{"rebalance", "--task", "t", "--to-even", "--dry-run", "--weights", "s1=-1"}, `--weights: "s1=-1" must be NAME=W`},
		{[]string{"rebalance", "--task", "t", "--to-even", "--dry-run"}, "no shard has made a cycle of task t, so its slots are not known: give --cycle"},
		{[]string{"rebalance", "--task", "t", "--to-even", "--dry-run", "--weights", "s1=0,s2=0,s3=0", "--cycle", "24s"}, "every weight is 0"},
	} {
		code, _, stderr := cmd(tt.args...)
		require.Equal(t, 2, code, "%v: %s", tt.args, stderr)
		require.Contains(t, stderr, tt.want, tt.args)
	}
}
