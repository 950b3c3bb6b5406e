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

// TestUpstreamCommand: check counts each upstream's accounts per slot and
// lists the one whose busiest slot needs more than the rate (exit 1), an
// override set for it makes it fit, list shows the override, and bad input
// is refused before anything is written.
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

	// The rate each bank's busiest slot needs, from the slot plan's Go
	// mirror of the bucket: 120 s is 8 slots of 15 s.
	plan, err := slotplan.New(120 * time.Second)
	require.NoError(t, err)
	need := map[string]float64{}
	perSlot := map[string]map[int]int{"big": {}, "small": {}}
	for i, id := range ids {
		bank := "big"
		if i%3 == 2 {
			bank = "small"
		}
		perSlot[bank][plan.SlotOf(id)]++
	}
	for bank, slots := range perSlot {
		for _, n := range slots {
			need[bank] = max(need[bank], float64(n)/plan.SlotDuration.Seconds())
		}
	}
	require.Greater(t, need["big"], need["small"])
	rate := (need["big"] + need["small"]) / 2 // small fits, big does not

	base := []string{"--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--task", "transactions"}
	check := append([]string{"upstream", "check"}, base...)
	check = append(check, "--table", "accounts", "--filter", "", "--upstream", "bank", "--cycle", "120s", "--rate", fmt.Sprint(rate), "--json")
	code, stdout, stderr := runCmd(t, check...)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "1 of 2 upstreams need more than their rate limit")
	var rows []struct {
		Key      string  `json:"key"`
		Accounts int64   `json:"accounts"`
		NeedRate float64 `json:"need_rate"`
		Fits     bool    `json:"fits"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, "big", rows[0].Key, "most needed first")
	require.EqualValues(t, len(big), rows[0].Accounts)
	require.InDelta(t, need["big"], rows[0].NeedRate, 1e-9)
	require.False(t, rows[0].Fits)
	require.Equal(t, "small", rows[1].Key)
	require.InDelta(t, need["small"], rows[1].NeedRate, 1e-9)
	require.True(t, rows[1].Fits)

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
	require.Contains(t, stderr, "riverutil.Migrate")
}
