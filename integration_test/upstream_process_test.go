package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/syncjob"
)

// TestUpstreamLimitsProcesses runs the limits across three real `riverslot
// worker` processes, which call a fake bank server on loopback from their
// syncs (--upstream-url): one 48 s cycle of 900 accounts over 23 banks
// of uneven size (shares in 1/(k+1), as the demo's: 241 accounts to 10),
// 12 calls a second (burst 2) and 3 in flight per bank, a breaker after 3
// failures for 2 s. bank-2 answers 503 for a third of the cycle; bank-3
// answers one call 429 with Retry-After 3 s. The server's record: no bank
// got more than 14 calls in a second nor more than 3 at once, whichever
// node sent them; after the 429 no call reached bank-3 for
// 3 s except the two that may already have been let through; every
// account was synced exactly once (by the three nodes together) or skipped
// and reported, as upstream_down for bank-2 only (checkSyncedOrReported).
func TestUpstreamLimitsProcesses(t *testing.T) {
	parallel(t)
	reserveProcessConns(t, 0, 3)

	const (
		accounts = 900
		cycle    = 48 * time.Second
		outage   = 16 * time.Second
		retry    = 3 * time.Second
	)
	limits := riverslot.UpstreamLimits{Rate: 12, Burst: 2, Concurrency: 3, FailureThreshold: 3, Cooldown: 2 * time.Second}
	banks := make([]string, 23)
	for k := range banks {
		banks[k] = fmt.Sprintf("bank-%d", k+1)
	}
	ctx, b := setup(t, accounts)
	markSchemaAsDemos(ctx, t, b.pool, b.schema)
	bankOf := assignBanksUneven(ctx, t, b, banks)
	require.Greater(t, len(idsAt(b.ids, bankOf, "bank-1")), 15*len(idsAt(b.ids, bankOf, "bank-23")), "uneven banks")
	fake := newFakeBanks(t, banks, 30*time.Millisecond)

	offset, start := offsetForStartIn(cycle, 10*time.Second)
	task := riverslot.Task{Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts", Filter: "active",
		Upstream: "bank", Limits: limits, Sync: b.recordSync()}
	scheduler := newScheduler(t, b, task)
	args := []string{"--task", "transactions", "--cycle", cycle.String(), "--trigger-offset", offset.String(), "--periodic=false", "--workers", "10",
		"--upstream", "bank", "--upstream-url", fake.srv.URL,
		"--upstream-rate", fmt.Sprint(limits.Rate), "--upstream-burst", fmt.Sprint(limits.Burst), "--upstream-concurrency", fmt.Sprint(limits.Concurrency),
		"--upstream-failures", fmt.Sprint(limits.FailureThreshold), "--upstream-cooldown", limits.Cooldown.String()}
	for _, id := range []string{"node1", "node2", "node3"} {
		startWorker(t, b.schema, id, args...)
	}
	insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
	require.NoError(t, err)
	_, err = scheduler.EnqueueCycle(ctx, insertOnly, "transactions", start)
	require.NoError(t, err)

	downFrom, downTo := start.Add(cycle/3), start.Add(cycle/3+outage)
	time.Sleep(time.Until(downFrom)) // moments on the wall clock, not conditions
	fake.setDown("bank-2", true)
	time.Sleep(time.Until(start.Add(cycle / 2)))
	fake.throttleNext("bank-3", retry)
	time.Sleep(time.Until(downTo))
	fake.setDown("bank-2", false)

	waitSyncsFinished(ctx, t, b, start.Add(cycle))

	res := checkSyncedOrReported(ctx, t, b, bankOf, "bank-2")
	synced := pgx.Identifier{b.schema, "synced"}.Sanitize()
	require.GreaterOrEqual(t, b.count(ctx, t, "SELECT count(DISTINCT client_id) FROM "+synced), int64(2), "the nodes shared the syncs")

	for _, bank := range banks {
		fake.mu.Lock()
		maxIn, n := fake.maxIn[bank], len(fake.arrivals[bank])
		fake.mu.Unlock()
		most, received := fake.mostInOneSecond(bank)
		t.Logf("%s: %d accounts, %d calls from 3 nodes, most sent in 0.9 s %d (received in 1 s %d), most in flight %d", bank, len(idsAt(b.ids, bankOf, bank)), n, most, received, maxIn)
		require.GreaterOrEqual(t, most, 0, "%s: every request carries its send time", bank)
		require.LessOrEqual(t, most, int(limits.Rate)+limits.Burst, "%s: calls sent in a second less the send jitter", bank)
		require.LessOrEqual(t, maxIn, int64(limits.Concurrency), "%s: calls in flight", bank)
		// What the bank saw: calls admitted in a second are at most Rate +
		// Burst, and those admitted earlier that arrive in it were in
		// flight at its start, each holding one of Concurrency leases.
		require.LessOrEqual(t, received, int(limits.Rate)+limits.Burst+limits.Concurrency, "%s: calls the bank received in one second", bank)
	}
	fake.mu.Lock()
	throttledAt, whileDown := fake.throttledAt["bank-3"], fake.whileDn["bank-2"]
	fake.mu.Unlock()
	require.False(t, throttledAt.IsZero(), "bank-3 answered a 429")
	during := fake.arrivalsBetween("bank-3", throttledAt, throttledAt.Add(retry))
	t.Logf("bank-3: %d calls in the %s after its 429; bank-2: %d calls while down, %d syncs skipped as upstream_down", during, retry, whileDown, res.skipped["bank-2"][syncjob.SkippedUpstreamDown])
	require.LessOrEqual(t, during, limits.Concurrency-1, "after the 429, only calls already let through reach bank-3 before its Retry-After")
	require.LessOrEqual(t, whileDown, limits.FailureThreshold+limits.Concurrency+int(outage/limits.Cooldown)+1, "calls bank-2 got while down")
}
