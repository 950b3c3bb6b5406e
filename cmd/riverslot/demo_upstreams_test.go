package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/demo"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/sim"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestDemoUpstreams runs one 48 s cycle of 1,200 accounts over 4 upstreams
// of uneven size, 20 calls a second (burst 1) and 2 in flight each, with
// bank-01 answering 503 for the second quarter of the cycle. It checks
// --json's upstreams against the limits and the run's exactly-once figures
// (no upstream was sent more than 21 calls in a second nor more than 2 at
// once; every account was synced once or reported), the outage against
// the breaker (the down bank's failed calls are only those that opened
// it, those in flight and its probes; it was deferred and probed; the
// other banks were never deferred nor probed), and riverslot simulate's
// model of the same flags against the run (the probes, one a cooldown
// while down, at most 2 above the model's; the other banks' lateness is
// logged beside the model's, not bounded by it). (Two side-by-side demos, with
// and without the outage, compare the other banks' lateness: see
// docs/simulate.md; on CI's 2 cores, beside the other packages' demos,
// a second demo made both too late to compare.)
func TestDemoUpstreams(t *testing.T) {
	t.Parallel()

	pool := riverslottest.Pool(t)
	const (
		accounts    = 1200
		cycle       = 48 * time.Second
		rate        = 20
		concurrency = 2
	)
	downFrom, downTo := 0.25, 0.5
	schema := newDemoSchemaName(t, pool)
	code, stdout, stderr := runCmd(t, "demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--accounts", fmt.Sprint(accounts), "--cycle", cycle.String(), "--json",
		"--upstreams", "4", "--upstream-rate", fmt.Sprint(rate), "--upstream-concurrency", fmt.Sprint(concurrency),
		"--upstream-down", fmt.Sprintf("bank-01:%g-%g", downFrom, downTo))
	require.Equal(t, 0, code, "stderr:\n%s", stderr)
	var s demo.Summary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s), stdout)

	// Every account synced once (a Sync call) or skipped with a reason,
	// never missed without one nor synced twice. How many are skipped is
	// the machine's: with its syncs held in each bank's line, a loaded CI
	// run skipped 702 of 1,200 as throttled past their NotAfter (0 alone).
	t.Logf("demo: %d accounts synced once, %d missed (%d with a skip reason), %d twice", s.Synced, s.Missed, s.MissedSkipped, s.Duplicates)
	require.Equal(t, s.MissedSkipped, s.Missed, "accounts missed without a skip reason")
	require.EqualValues(t, accounts, s.Synced+s.Missed)
	require.Zero(t, s.Duplicates)
	require.Len(t, s.Upstreams, 4)
	var total int64
	for i, u := range s.Upstreams {
		require.Equal(t, fmt.Sprintf("bank-%02d", i), u.Key)
		total += u.Accounts
		require.InDelta(t, float64(rate), u.RateLimit, 0)
		require.Equal(t, 1, u.Burst)
		require.Equal(t, concurrency, u.ConcurrencyLimit)
		require.Positive(t, u.Calls)
		t.Logf("%s: %d calls, most sent in 1 s %d, received in 1 s %d, received above the rate %.2f, in flight %d", u.Key, u.Calls, u.MaxSentPerSecond, u.MaxPerSecond, u.MaxReceivedAboveRate, u.MaxInFlight)
		require.LessOrEqual(t, u.MaxSentPerSecond, rate+1, "%s: calls sent in one second", u.Key)
		require.LessOrEqual(t, u.MaxInFlight, int64(concurrency), "%s: calls in flight", u.Key)
		// What the bank saw: calls admitted in a second are at most rate +
		// burst (1), and those admitted earlier that arrive in it were in
		// flight at its start, each holding one of concurrency leases.
		require.LessOrEqual(t, u.MaxPerSecond, rate+1+concurrency, "%s: calls the bank received in one second", u.Key)
		// The same over every window, however long: the calls the bank
		// received beyond rate x the window's length are at most burst +
		// concurrency (those started in it, and those in flight at its
		// start). The right limiter measured 1.25-1.87 in four runs. One 10%
		// fast, tried three times: in the run that backlogged it (a quiet
		// machine), 23 received in a second, within the one-second bound,
		// and 3.35 above the rate, past this one; in the others its syncs
		// never queued at the limit (2.07-2.59), as neither bound can see.
		require.LessOrEqual(t, u.MaxReceivedAboveRate, float64(1+concurrency), "%s: calls the bank received beyond the rate in some window", u.Key)
		require.Equal(t, u.Accounts, u.Synced+u.Skipped, "%s: each account synced once or reported skipped", u.Key)
	}
	require.EqualValues(t, accounts, total)
	// Uneven: bank-k gets a share in 1/(k+1) of the first UUID byte's
	// values (123, 61, 41 and 31 of 256).
	require.Greater(t, s.Upstreams[0].Accounts, 3*s.Upstreams[3].Accounts)
	down := s.Upstreams[1]
	t.Logf("bank-01 down: %d accounts, %d calls, %d synced, %d deferred, %d probes, %d skipped", down.Accounts, down.Calls, down.Synced, down.Deferred, down.Probes, down.Skipped)
	require.Positive(t, down.Deferred, "bank-01's syncs were deferred while it was down")
	require.Positive(t, down.Probes)
	require.Less(t, down.Synced, down.Calls, "bank-01 answered some calls 503")
	require.LessOrEqual(t, down.Calls-down.Synced, int64(sim.BreakerThreshold)+down.Probes+concurrency,
		"while down, bank-01 got only the failures that opened its breaker, the calls in flight then and its probes")
	for _, i := range []int{0, 2, 3} {
		u := s.Upstreams[i]
		t.Logf("%s: lateness p99 %.3fs, %d skipped (a busy machine's syncs can reach their NotAfter in line)", u.Key, u.LatenessP99Seconds, u.Skipped)
		require.Zero(t, u.Deferred+u.Probes, "%s is not held back by bank-01's outage", u.Key)
	}

	// The simulator's model of the same flags: the breaker's probes and
	// deferrals as measured; the other banks never later than measured
	// (it models an idle machine).
	results, err := sim.Run(context.Background(), sim.Config{Accounts: accounts, Cycle: cycle, SyncDuration: sim.Dist{Kind: "fixed", A: 10 * time.Millisecond},
		Upstreams: sim.Upstreams{Count: 4, Rate: rate, Concurrency: concurrency, Down: &sim.Down{Bank: 1, From: downFrom, To: downTo}}})
	require.NoError(t, err)
	predicted := results[0].Upstreams[1]
	t.Logf("simulated bank-01: %d accounts, %d calls, %d synced, %d deferred, %d probes, %d skipped",
		predicted.Accounts, predicted.Calls, predicted.Synced, predicted.Deferred, predicted.Probes, predicted.Skipped)
	// Probes: never more than the model's (one per open period of the
	// outage, whatever the machine). How many fewer, and how many syncs
	// were deferred, is the machine's: a loaded one starts syncs late, so
	// an open period can pass with no call to probe it, and syncs due
	// before or after the outage meet it (CI runs measured probes 5
	// against 8 simulated, deferrals 136 and 23 against 85 and 42). The
	// rules that hold on any machine are checked above: deferred and
	// probed at all, and no call to the down bank beyond those that opened
	// its breaker, those in flight and its probes.
	require.LessOrEqual(t, down.Probes, predicted.Probes+2, "probes: measured above the model's")
	// The other banks' lateness, model and run side by side: a figure, not
	// a bound either way. The model is not the run's lower bound: it syncs
	// its own seeded fleet (the demo seeds random UUIDs: other regular
	// times, other bank sizes), and River's scheduler, which makes the
	// fan-out's scheduled syncs available every 5 s, ticks at a phase fixed
	// in the model and set by when the run's leader was elected. Moving
	// only that phase over 0-4.5 s moves the model's bank-03 p99 between
	// 2.8 s and 3.6 s (2.3 s and 3.7 s over four fleet seeds); a
	// fresh-clone CI run measured 2.98 s against the model's 3.14 s (the
	// check was measured + 0.1 s). That a run is never less late than its
	// limits allow is bounded from what the banks received instead
	// (MaxReceivedAboveRate above).
	for _, i := range []int{0, 2, 3} {
		t.Logf("%s: lateness p99 simulated %.3fs (%d accounts), measured %.3fs (%d accounts)", s.Upstreams[i].Key,
			results[0].Upstreams[i].LatenessP99Seconds, results[0].Upstreams[i].Accounts, s.Upstreams[i].LatenessP99Seconds, s.Upstreams[i].Accounts)
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
