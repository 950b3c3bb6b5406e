package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestDemoUpstreams runs one 48 s cycle of 1,200 accounts over 4 upstreams
// of uneven size, 15 calls a second (burst 1) and 2 in flight each, one
// answering 503 for the second quarter of the cycle, and checks --json's
// upstreams against the limits and the run's exactly-once figures: no
// upstream was sent more than 16 calls in a second nor more than 2 at once,
// the down one was deferred and probed, every account was synced once.
func TestDemoUpstreams(t *testing.T) {
	t.Parallel()

	pool := riverslottest.Pool(t)
	schema := newDemoSchemaName(t, pool)
	const accounts = 1200
	code, stdout, stderr := runCmd(t, "demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--accounts", fmt.Sprint(accounts), "--cycle", (48 * time.Second).String(), "--json",
		"--upstreams", "4", "--upstream-rate", "15", "--upstream-concurrency", "2", "--upstream-down", "bank-01:0.25-0.5")
	require.Equal(t, 0, code, "stderr:\n%s", stderr)

	var s demoSummary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s), stdout)
	require.EqualValues(t, accounts, s.Synced, "every account synced once (or skipped and reported, which counts as synced)")
	require.Zero(t, s.Missed)
	require.Zero(t, s.Duplicates)
	require.Len(t, s.Upstreams, 4)
	var total int64
	for i, u := range s.Upstreams {
		require.Equal(t, fmt.Sprintf("bank-%02d", i), u.Key)
		total += u.Accounts
		require.InDelta(t, 15.0, u.RateLimit, 0)
		require.Equal(t, 1, u.Burst)
		require.Equal(t, 2, u.ConcurrencyLimit)
		require.Positive(t, u.Calls)
		require.LessOrEqual(t, u.MaxSentPerSecond, 16, "%s: calls sent in one second", u.Key)
		require.LessOrEqual(t, u.MaxInFlight, int64(2), "%s: calls in flight", u.Key)
	}
	require.EqualValues(t, accounts, total)
	// Uneven: bank-k gets a share in 1/(k+1) of the first UUID byte's
	// values (123, 61, 41 and 31 of 256).
	require.Greater(t, s.Upstreams[0].Accounts, 3*s.Upstreams[3].Accounts)
	down := s.Upstreams[1]
	require.Positive(t, down.Deferred, "bank-01's syncs were deferred while it was down")
	require.Positive(t, down.Probes)
	require.Less(t, down.Synced, down.Calls, "bank-01 answered some calls 503")
	for _, i := range []int{0, 2, 3} {
		require.Zero(t, s.Upstreams[i].Deferred, "%s is not held back by bank-01's outage", s.Upstreams[i].Key)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream-rate", "5"}, "need --upstreams"},
		{[]string{"--upstreams", "3", "--upstream-down", "bank-07:0.1-0.2"}, `no upstream "bank-07"`},
		{[]string{"--upstreams", "3", "--upstream-down", "bank-01:0.6-0.2"}, "0 <= FROM < TO <= 1"},
		{[]string{"--upstreams", "-1"}, "--upstreams must be 0"},
	} {
		code, _, stderr := runCmd(t, append([]string{"demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema}, c.args...)...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want)
	}
}
