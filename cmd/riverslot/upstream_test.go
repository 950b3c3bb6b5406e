package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
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
	require.Contains(t, stderr, `1 of 2 upstreams cannot sync their accounts in a cycle at their limits: "big" (400 accounts need 3.333/s; rate bound: rate `+fmt.Sprintf("%.4g", rate)+`/s; raise Rate to 3.333/s)`)
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
	require.Contains(t, stdout, "upstreams (bank) of task transactions against their limits, min(rate, concurrency / latency):")
	require.Regexp(t, `"big"\s+400\s+3\.333\s+`+fmt.Sprintf("%.3f", need["big"])+`\s+\S+\s+none\s+unknown\s+\S+\s+rate\s+NO\s+NO`, stdout)
	require.Contains(t, stderr, `"big" (400 accounts need 3.333/s; rate bound`)
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

// TestUpstreamCheckConcurrency: issue 41's bank, 800 accounts on a 64 s
// cycle (12.5 syncs a second) under a rate of 15/s, with 2 syncs in flight
// at 800 ms each (2.5/s): check names the concurrency bound and the
// Concurrency that carries the cycle, exit 1; with that Concurrency (set
// by flag or by an operator's override) it fits; without a latency it
// says the concurrency limit was not weighed.
func TestUpstreamCheckConcurrency(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 800)
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "ALTER TABLE "+table+" ADD COLUMN bank text NOT NULL DEFAULT 'bank'")
	require.NoError(t, err)

	// What the bank needs, from the definitions: its accounts over the
	// cycle, and its busiest slot's accounts over the slot (64 s is 64
	// slots of 1 s).
	const (
		cycle   = 64 * time.Second
		rate    = 15.0
		latency = 800 * time.Millisecond
	)
	plan, err := slotplan.New(cycle)
	require.NoError(t, err)
	average := float64(len(ids)) / cycle.Seconds()
	require.InDelta(t, 12.5, average, 1e-12)
	perSlot := map[int]int{}
	for _, id := range ids {
		perSlot[plan.SlotOf(id)]++
	}
	need := 0.0
	for _, n := range perSlot {
		need = max(need, float64(n)/plan.SlotDuration.Seconds())
	}
	require.Greater(t, need, average, "hash placement puts more in some slot")
	// In flight at once to carry a rate: rate x latency, rounded up.
	inFlight := func(r float64) int { return int(math.Ceil(r*latency.Seconds() - 1e-9)) }
	forCycle, forSlot := inFlight(average), inFlight(need)
	require.Equal(t, 10, forCycle)

	type budget struct {
		Key             string   `json:"key"`
		Accounts        int64    `json:"accounts"`
		AverageRate     float64  `json:"average_rate"`
		NeedRate        float64  `json:"need_rate"`
		Rate            float64  `json:"rate_limit"`
		Concurrency     int      `json:"concurrency"`
		Latency         *float64 `json:"latency_seconds"`
		ConcurrencyRate *float64 `json:"concurrency_rate"`
		LatencyUnknown  bool     `json:"latency_unknown"`
		Limit           float64  `json:"effective_rate"`
		Bound           string   `json:"bound"`
		Fits            bool     `json:"fits"`
		OnTime          bool     `json:"on_time"`
		ForCycle        *int     `json:"concurrency_for_cycle"`
		ForSlot         *int     `json:"concurrency_for_busiest_slot"`
	}
	base := []string{"--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--task", "transactions"}
	check := func(extra ...string) []string {
		args := append([]string{"upstream", "check"}, base...)
		args = append(args, "--table", "accounts", "--filter", "", "--upstream", "bank", "--cycle", cycle.String(), "--rate", fmt.Sprint(rate))
		return append(args, extra...)
	}
	checkJSON := func(wantCode int, extra ...string) budget {
		t.Helper()
		code, stdout, stderr := runCmd(t, check(append(extra, "--json")...)...)
		require.Equal(t, wantCode, code, stderr)
		var rows []budget
		require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
		require.Len(t, rows, 1)
		b := rows[0]
		require.Equal(t, "bank", b.Key)
		require.EqualValues(t, len(ids), b.Accounts)
		require.InDelta(t, average, b.AverageRate, 1e-9)
		require.InDelta(t, need, b.NeedRate, 1e-9)
		require.InDelta(t, rate, b.Rate, 1e-9)
		return b
	}

	// The case: the rate alone would fit, 2 in flight at 800 ms
	// do not.
	lat := []string{"--upstream-latency", latency.String()}
	b := checkJSON(1, append(lat, "--concurrency", "2")...)
	require.Equal(t, "concurrency", b.Bound)
	require.Equal(t, 2, b.Concurrency)
	require.InDelta(t, latency.Seconds(), *b.Latency, 1e-12)
	require.InDelta(t, 2/latency.Seconds(), *b.ConcurrencyRate, 1e-9)
	require.InDelta(t, 2/latency.Seconds(), b.Limit, 1e-9)
	require.False(t, b.Fits)
	require.False(t, b.OnTime)
	require.Equal(t, forCycle, *b.ForCycle)
	require.Equal(t, forSlot, *b.ForSlot)
	code, stdout, stderr := runCmd(t, check(append(lat, "--concurrency", "2")...)...)
	require.Equal(t, 1, code, stderr)
	require.Regexp(t, `"bank"\s+800\s+12\.500\s+\S+\s+15\s+2\s+800ms\s+2\.5\s+concurrency\s+NO\s+NO`, stdout)
	require.Contains(t, stderr, fmt.Sprintf(`1 of 1 upstreams cannot sync their accounts in a cycle at their limits: "bank" (800 accounts need 12.5/s; concurrency bound: rate 15/s, concurrency 2 / 800ms a sync = 2.5/s; raise Concurrency to %d)`, forCycle))

	// Just enough in flight for the cycle: it fits (exit 0), and the
	// busiest slot, above the cycle's average, waits; the table says
	// what keeps it on time.
	b = checkJSON(0, append(lat, "--concurrency", fmt.Sprint(forCycle))...)
	require.Equal(t, "concurrency", b.Bound, "%d / 800ms is below the rate", forCycle)
	require.True(t, b.Fits)
	require.False(t, b.OnTime)
	code, stdout, stderr = runCmd(t, check(append(lat, "--concurrency", fmt.Sprint(forCycle))...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "1 upstream(s) fit in a cycle but not in their busiest slot")
	slotFix := fmt.Sprintf("raise Concurrency to %d", forSlot)
	if need > rate {
		slotFix = fmt.Sprintf("raise Rate to %.4g/s and ", need) + slotFix
	}
	require.Contains(t, stdout, fmt.Sprintf(`"bank": busiest slot needs %.4g/s, concurrency bound %.4g/s; on time: %s`, need, float64(forCycle)/latency.Seconds(), slotFix))

	// Enough in flight for more than the rate: the rate binds again.
	many := int(math.Ceil(rate*latency.Seconds())) + 5
	b = checkJSON(0, append(lat, "--concurrency", fmt.Sprint(many))...)
	require.Equal(t, "rate", b.Bound)
	require.InDelta(t, rate, b.Limit, 1e-9)
	require.True(t, b.Fits)
	require.Equal(t, need <= rate, b.OnTime)

	// An operator's override wins over the task's Concurrency: 2 by
	// flag, forCycle for the key.
	set := append([]string{"upstream", "set"}, base...)
	code, _, stderr = runCmd(t, append(set, "--key", "bank", "--concurrency", fmt.Sprint(forCycle))...)
	require.Equal(t, 0, code, stderr)
	b = checkJSON(0, append(lat, "--concurrency", "2")...)
	require.Equal(t, forCycle, b.Concurrency)
	require.True(t, b.Fits)
	code, _, stderr = runCmd(t, append(set, "--key", "bank", "--clear")...)
	require.Equal(t, 0, code, stderr)

	// No latency: the concurrency limit cannot be weighed, and check
	// says so, with the longest call 2 in flight carry the busiest slot
	// at.
	b = checkJSON(0, "--concurrency", "2")
	require.True(t, b.LatencyUnknown)
	require.Nil(t, b.Latency)
	require.Nil(t, b.ConcurrencyRate)
	require.Nil(t, b.ForCycle)
	require.Equal(t, "rate", b.Bound)
	code, stdout, stderr = runCmd(t, check("--concurrency", "2")...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "latency unknown: give --upstream-latency")
	longest := time.Duration(2 / need * float64(time.Second)).Round(time.Millisecond)
	require.Contains(t, stdout, fmt.Sprintf(`"bank": Concurrency 2 carries its busiest slot (%.4g/s) while a sync takes at most %s`, need, longest))

	for _, c := range []struct {
		args []string
		want string
	}{
		{check("--upstream-latency", "-1s", "--concurrency", "2"), "--upstream-latency must be a positive duration"},
		{check("--concurrency", "-1"), "--concurrency must be 0 (no limit) or more"},
	} {
		code, _, stderr := runCmd(t, c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want)
	}
}
