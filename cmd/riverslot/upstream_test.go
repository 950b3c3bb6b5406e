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
	"github.com/riverslot/riverslot/slotplan"
)

// TestUpstreamCommand: check (and plan --upstreams) counts each upstream's
// accounts per slot, exits 1 for the one whose accounts need more than its
// rate over the cycle and reports, exit 0, one that fits the cycle but not
// its busiest slot; an override set for it makes it fit, list shows the
// override, and bad input is refused before anything is written.
func TestUpstreamCommand(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 600)
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "ALTER TABLE "+table+" ADD COLUMN bank text")
	require.NoError(t, err)
	// Two thirds of the accounts at big, the rest at small.
	var big []string
	for i, id := range ids {
		if i%3 != 2 {
			big = append(big, id.String())
		}
	}
	_, err = pool.Exec(ctx, "UPDATE "+table+" SET bank = CASE WHEN id::text = ANY($1) THEN 'big' ELSE 'small' END", big)
	require.NoError(t, err)

	// The rate each bank needs over the cycle and in its busiest slot,
	// from the slot plan's Go mirror of the bucket: 120 s is 8 slots of
	// 15 s.
	plan, err := slotplan.New(120 * time.Second)
	require.NoError(t, err)
	need, average := map[string]float64{}, map[string]float64{}
	perSlot := map[string]map[int]int{"big": {}, "small": {}}
	for i, id := range ids {
		bank := "big"
		if i%3 == 2 {
			bank = "small"
		}
		perSlot[bank][plan.SlotOf(id)]++
		average[bank] += 1 / plan.Cycle.Seconds()
	}
	for bank, slots := range perSlot {
		for _, n := range slots {
			need[bank] = max(need[bank], float64(n)/plan.SlotDuration.Seconds())
		}
	}
	require.Greater(t, average["big"], average["small"])
	require.Greater(t, need["big"], average["big"], "a slot above the average")
	rate := (average["big"] + average["small"]) / 2 // small fits in a cycle, big does not

	type budget struct {
		Key         string  `json:"key"`
		Accounts    int64   `json:"accounts"`
		AverageRate float64 `json:"average_rate"`
		NeedRate    float64 `json:"need_rate"`
		Fits        bool    `json:"fits"`
		OnTime      bool    `json:"on_time"`
	}
	base := []string{"--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--task", "transactions"}
	checkAt := func(rate float64) []string {
		check := append([]string{"upstream", "check"}, base...)
		return append(check, "--table", "accounts", "--filter", "", "--upstream", "bank", "--cycle", "120s", "--rate", fmt.Sprint(rate), "--json")
	}
	check := checkAt(rate)
	code, stdout, stderr := runCmd(t, check...)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, `1 of 2 upstreams cannot sync their accounts in a cycle at their rate limit: "big" (400 accounts need`)
	var rows []budget
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, "big", rows[0].Key, "most needed first")
	require.EqualValues(t, len(big), rows[0].Accounts)
	require.InDelta(t, average["big"], rows[0].AverageRate, 1e-9)
	require.InDelta(t, need["big"], rows[0].NeedRate, 1e-9)
	require.False(t, rows[0].Fits)
	require.False(t, rows[0].OnTime)
	require.Equal(t, "small", rows[1].Key)
	require.InDelta(t, need["small"], rows[1].NeedRate, 1e-9)
	require.True(t, rows[1].Fits)
	require.Equal(t, need["small"] <= rate, rows[1].OnTime)

	// A rate between big's average and its busiest slot: it fits in the
	// cycle (exit 0), but that slot's syncs wait in line.
	mid := (average["big"] + need["big"]) / 2
	code, stdout, stderr = runCmd(t, checkAt(mid)...)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.True(t, rows[0].Fits)
	require.False(t, rows[0].OnTime)

	// plan --upstreams prints the same budget under the slot table, and
	// exits 1 for the same upstream.
	code, stdout, stderr = runCmd(t, "plan", "--cycle", "120s", "--task", "transactions", "--database-url", riverslottest.DatabaseURL(),
		"--pins-schema", schema, "--river-schema", schema, "--upstreams", "bank", "--upstream-rate", fmt.Sprint(rate))
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stdout, "upstreams (bank) of task transactions against their rate limits:")
	require.Regexp(t, `"big"\s+400\s+3\.333\s+`+fmt.Sprintf("%.3f", need["big"])+`\s+\S+\s+NO\s+NO`, stdout)
	require.Contains(t, stderr, `"big" (400 accounts need 3.33/s`)
	code, _, stderr = runCmd(t, "plan", "--cycle", "120s", "--upstreams", "bank")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--upstreams needs --database-url")

	// An operator raises big's rate: it fits.
	set := append([]string{"upstream", "set"}, base...)
	code, _, stderr = runCmd(t, append(set, "--key", "big", "--rate", fmt.Sprint(need["big"]+1), "--burst", "3")...)
	require.Equal(t, 0, code, stderr)
	code, _, stderr = runCmd(t, check...)
	require.Equal(t, 0, code, stderr)

	list := append([]string{"upstream", "list"}, base...)
	code, stdout, stderr = runCmd(t, append(list, "--json")...)
	require.Equal(t, 0, code, stderr)
	var listed []struct {
		Key   string   `json:"key"`
		Rate  *float64 `json:"rate_override"`
		Burst *int     `json:"burst_override"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, "big", listed[0].Key)
	require.InDelta(t, need["big"]+1, *listed[0].Rate, 1e-9)
	require.Equal(t, 3, *listed[0].Burst)

	// --clear alone drops the overrides.
	code, _, stderr = runCmd(t, append(set, "--key", "big", "--clear", "--rate", "1")...)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--clear drops every override")
	code, _, stderr = runCmd(t, append(set, "--key", "big", "--clear")...)
	require.Equal(t, 0, code, stderr)
	code, _, _ = runCmd(t, check...)
	require.Equal(t, 1, code, "the task's rate applies again")

	for _, c := range []struct {
		args []string
		want string
	}{
		{append(set, "--key", "big"), "set needs --rate, --burst, --concurrency or --clear"},
		{append(set, "--key", "big", "--rate", "-1"), "--rate must be a finite number"},
		{append(set, "--key", strings.Repeat("k", 129), "--rate", "1"), "--key is 129 bytes"},
		{[]string{"upstream", "nope"}, "upstream needs a subcommand"},
		{append(list, "--limit", "1"), "--limit must be 2-10000"},
	} {
		code, _, stderr := runCmd(t, c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want)
	}
	// A schema without the tables: exit 2, with the fix.
	empty := riverslottest.EmptySchema(ctx, t, pool)
	code, _, stderr = runCmd(t, "upstream", "list", "--database-url", riverslottest.DatabaseURL(), "--schema", empty)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "riverslot.Migrate")
}
