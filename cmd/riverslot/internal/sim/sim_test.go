package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/slotplan"
)

func run(t *testing.T, cfg Config) []*Result {
	t.Helper()
	results, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	return results
}

// Every account is synced once per cycle, one cycle apart, shortly after
// its time: the poll interval bounds how late River starts a due job.
func TestRiverslotSyncsEveryAccountOncePerCycle(t *testing.T) {
	t.Parallel()
	const accounts, cycles = 5000, 3
	cycle := 120 * time.Second // 8 slots of 15 s; per-slot jobs run 7.5 s ahead
	r := run(t, Config{Accounts: accounts, Cycle: cycle, Duration: cycles * cycle})[0]
	require.Equal(t, int64(accounts*cycles), r.JobsCompleted)
	require.Zero(t, r.AccountsSkipped)
	require.Zero(t, r.JobsDiscarded)
	// Each account's syncs are a cycle apart, give or take its lateness.
	require.InDelta(t, cycle.Seconds(), r.GapP50Seconds, 0.3)
	require.InDelta(t, cycle.Seconds(), r.GapMaxSeconds, 0.3)
	// A due job waits for the next poll (250ms + up to 25ms jitter) and
	// the fetch query.
	require.Greater(t, r.LatenessP50Seconds, 0.05)
	require.Less(t, r.LatenessMaxSeconds, 0.3)
	require.Greater(t, r.LatenessMaxSeconds, 0.2)
}

// Syncs start in their account's slot: each slot-long interval's starts are
// the accounts slotplan puts in that slot, counted here from the fleet.
func TestRiverslotStartsFollowSlots(t *testing.T) {
	t.Parallel()
	const accounts = 40000
	cycle := 5120 * time.Second // 256 slots of 20 s
	plan, err := slotplan.New(cycle)
	require.NoError(t, err)
	want := make([]int64, plan.Slots)
	for _, a := range newFleet(accounts, 7, plan) {
		want[plan.SlotOf(a.id)]++
	}
	r := run(t, Config{Accounts: accounts, Cycle: cycle, Seed: 7, Interval: 160 * time.Second})[0]
	// Rows are 160 s (8 slots) wide; row i covers slots 8(i-1) .. 8i-1.
	for i := 1; i <= 32; i++ {
		var slots int64
		for s := 8 * (i - 1); s < 8*i; s++ {
			slots += want[s]
		}
		// Starts near a row's edge may fall into the next row: lateness is
		// under 0.3 s of 160 s.
		require.InEpsilon(t, float64(slots), float64(r.Rows[i].Starts), 0.01, "row %d (slots %d-%d)", i, 8*(i-1), 8*i-1)
	}
}

// With too few workers the queue backs up: workers are never busier than
// all the time, and the backlog drains after the cycle.
func TestWorkersBoundThroughput(t *testing.T) {
	t.Parallel()
	r := run(t, Config{Accounts: 3000, Cycle: 120 * time.Second, Workers: 4, SyncDuration: Dist{Kind: "fixed", A: time.Second}})[0]
	require.Equal(t, int64(3000), r.JobsCompleted) // after the drain
	require.LessOrEqual(t, r.WorkerUtilization, 1.0)
	require.Greater(t, r.WorkerUtilization, 0.9)
	// 4 workers x 1 sync/s, plus those a fetch adds when syncs end just
	// before the second turns.
	require.LessOrEqual(t, r.MaxStartsPerSecond, int64(8))
	require.Greater(t, r.LatenessP99Seconds, 300.0) // 3000 syncs need 750 s of four workers
}

// Short jobs and a backlog: River's 100 ms fetch cooldown caps starts at
// MaxWorkers per fetch, ten fetches a second.
func TestFetchCooldownCapsStarts(t *testing.T) {
	t.Parallel()
	r := run(t, Config{Accounts: 60000, Cycle: 120 * time.Second, Workers: 20, Strategies: []Strategy{StrategyNaive}, InsertRate: 1e9})[0]
	require.LessOrEqual(t, r.MaxStartsPerSecond, int64(20*10+20))
	require.Greater(t, r.MaxStartsPerSecond, int64(20*10*8/10))
}

// Failed attempts are retried with River's backoff up to MaxAttempts.
func TestRetries(t *testing.T) {
	t.Parallel()
	const n = 20000
	r := run(t, Config{Accounts: n, Cycle: 120 * time.Second, FailRate: 0.5, MaxAttempts: 2})[0]
	// Each sync fails its first attempt with p = 0.5 and, if so, its
	// second with p = 0.5: 1.5 failures per... 0.75 per account expected,
	// a quarter discarded.
	require.InEpsilon(t, 0.75*n, float64(r.JobsFailed), 0.03)
	require.InEpsilon(t, 0.25*n, float64(r.JobsDiscarded), 0.05)
	require.Equal(t, int64(n), r.JobsCompleted+r.JobsDiscarded)
}

// During an outage nothing runs; afterwards the missed slots' accounts are
// synced late, once each, and the stale slots more than half a cycle late
// are skipped.
func TestOutage(t *testing.T) {
	t.Parallel()
	const n = 8000
	cycle := 120 * time.Second
	r := run(t, Config{Accounts: n, Cycle: cycle, Outage: &Outage{Start: 30 * time.Second, Length: 60 * time.Second}})[0]
	require.Equal(t, int64(n), r.JobsCompleted+r.AccountsSkipped)
	// Slot 2's syncs (30-45 s) were queued before the outage and start
	// when it ends at 90 s.
	require.Greater(t, r.LatenessMaxSeconds, 44.0)
	for _, row := range r.Rows {
		if row.T > 31 && row.T <= 90 {
			require.Zero(t, row.Starts, "starts in the row ending at %gs, during the outage", row.T)
		}
	}

	// A longer outage: slots more than half a cycle late are skipped.
	r = run(t, Config{Accounts: n, Cycle: cycle, Outage: &Outage{Start: 5 * time.Second, Length: 100 * time.Second}})[0]
	require.Positive(t, r.AccountsSkipped)
	require.Equal(t, int64(n), r.JobsCompleted+r.AccountsSkipped)
}

func TestNaiveAndLRS(t *testing.T) {
	t.Parallel()
	const n = 12000
	results := run(t, Config{Accounts: n, Cycle: 120 * time.Second, Strategies: []Strategy{StrategyNaive, StrategyLRS}})
	naive, lrs := results[0], results[1]
	// Naive inserts every account at once.
	require.Equal(t, int64(n), naive.PeakQueueDepth)
	require.Equal(t, int64(n), naive.JobsCompleted)
	// The poller enqueues at most K = ceil(1.1 n / 60) at a time and gets
	// through every account within the cycle.
	require.LessOrEqual(t, lrs.PeakQueueDepth, int64((n*11/10+59)/60))
	require.Equal(t, int64(n), lrs.JobsCompleted)
}

func TestChurnKeepsEveryAccountSynced(t *testing.T) {
	t.Parallel()
	const n = 6000
	cycle := 64 * time.Second
	r := run(t, Config{Accounts: n, Cycle: cycle, Duration: 4 * cycle, Churn: 0.1})[0]
	// New accounts join at each cycle start and are synced that cycle;
	// removed ones are not: n per cycle, give or take the churned accounts
	// of slot 0, whose per-slot job runs (a lead) before the cycle start.
	require.InDelta(t, 4*n, r.JobsCompleted, 4*2*0.1*n/64)
}

// The same Config gives the same results and byte-identical files; another
// seed does not.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	cfg := Config{
		Accounts: 4000, Cycle: 64 * time.Second, Duration: 200 * time.Second, Strategies: Strategies,
		SyncDuration: Dist{Kind: "lognormal", A: 20 * time.Millisecond, B: 200 * time.Millisecond},
		FailRate:     0.05, Churn: 0.02, Outage: &Outage{Start: 70 * time.Second, Length: 20 * time.Second}, Seed: 42,
	}
	var dirs []string
	var all [][]*Result
	for range 2 {
		results := run(t, cfg)
		for _, r := range results {
			r.WallSeconds = 0
		}
		all = append(all, results)
		dir := t.TempDir()
		require.NoError(t, WriteOutputs(context.Background(), dir, results))
		dirs = append(dirs, dir)
	}
	require.Equal(t, all[0], all[1])
	for _, f := range Files {
		a, err := os.ReadFile(filepath.Join(dirs[0], f))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dirs[1], f))
		require.NoError(t, err)
		require.NotEmpty(t, a, f)
		require.True(t, bytes.Equal(a, b), "%s differs between two runs", f)
	}

	cfg.Seed = 43
	other := run(t, cfg)
	require.NotEqual(t, all[0][2].LatenessP99Seconds, other[2].LatenessP99Seconds)
}

func TestParse(t *testing.T) {
	t.Parallel()
	d, err := ParseDist("lognormal:300ms,2s")
	require.NoError(t, err)
	require.Equal(t, Dist{Kind: "lognormal", A: 300 * time.Millisecond, B: 2 * time.Second}, d)
	d, err = ParseDist("uniform:100ms-500ms")
	require.NoError(t, err)
	require.Equal(t, 300*time.Millisecond, d.mean())
	for _, bad := range []string{"fast", "uniform:2s-1s", "lognormal:0s,1s", "gamma:1s,2s", "-1s"} {
		_, err := ParseDist(bad)
		require.Error(t, err, bad)
	}
	o, err := ParseOutage("30m+1h")
	require.NoError(t, err)
	require.Equal(t, &Outage{Start: 30 * time.Minute, Length: time.Hour}, o)
	for _, bad := range []string{"30m", "30m+0s", "x+1h", "-1m+1h"} {
		_, err := ParseOutage(bad)
		require.Error(t, err, bad)
	}
	s, err := ParseStrategies("riverslot,naive,riverslot")
	require.NoError(t, err)
	require.Equal(t, []Strategy{StrategyRiverslot, StrategyNaive}, s)
	_, err = ParseStrategies("fifo")
	require.ErrorContains(t, err, `unknown strategy "fifo"`)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{Accounts: 0, Cycle: 7 * time.Second, FailRate: 1})
	require.ErrorContains(t, err, "Accounts must be between 1")
	require.ErrorContains(t, err, "FailRate must be in [0, 1)")
	_, err = Run(context.Background(), Config{Accounts: 10, Cycle: 7 * time.Second})
	require.ErrorContains(t, err, "Cycle") // riverslot's own validation
}

func TestHistQuantiles(t *testing.T) {
	t.Parallel()
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(int64(i) * int64(time.Millisecond))
	}
	require.InEpsilon(t, 0.500, h.quantile(0.50), 0.01)
	require.InEpsilon(t, 0.990, h.quantile(0.99), 0.01)
	require.Equal(t, 1.0, h.quantile(1))
	for us := int64(0); us < 1<<40; us = us*3/2 + 1 {
		v := histValue(histIndex(us))
		require.InDelta(t, float64(us), v, max(float64(us)*0.008, 0.5), "%d µs", us)
	}
}

// With --reciprocal both tasks sync every account once per cycle, on
// opposite sides of it.
func TestReciprocal(t *testing.T) {
	t.Parallel()
	const n = 4000
	cycle := 120 * time.Second
	specs, err := Specs(Config{Cycle: cycle, Reciprocal: true})
	require.NoError(t, err)
	require.Len(t, specs, 2)
	require.Equal(t, specs[0].Plan.Slots/2, specs[1].Shift)
	r := run(t, Config{Accounts: n, Cycle: cycle, Duration: 2 * cycle, Reciprocal: true})[0]
	require.Equal(t, int64(2*2*n), r.JobsCompleted)
	// Gaps are per task: a cycle, not the half cycle between the tasks.
	require.InDelta(t, cycle.Seconds(), r.GapP50Seconds, 0.3)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{Accounts: 100000, Cycle: 24 * time.Hour, Duration: 168 * time.Hour})
	require.ErrorIs(t, err, context.Canceled)
}

// The fleet is the same set of UUIDs whatever the bucket count, in the
// bucket index's order (bucket, then id) of the plan it is drawn for.
func TestFleetInKeysetOrder(t *testing.T) {
	t.Parallel()
	const accounts = 20000
	sets := make([]map[[16]byte]bool, 0, 2)
	for _, buckets := range []int{slotplan.Buckets, slotplan.BucketsTwoByte} {
		plan, err := slotplan.NewBuckets(64*time.Second, buckets)
		require.NoError(t, err)
		fleet := newFleet(accounts, 3, plan)
		set := make(map[[16]byte]bool, accounts)
		for i, a := range fleet {
			set[a.id] = true
			if i == 0 {
				continue
			}
			p := fleet[i-1]
			bp, ba := plan.BucketOf(p.id), plan.BucketOf(a.id)
			require.True(t, bp < ba || bp == ba && bytes.Compare(p.id[:], a.id[:]) < 0, "%d buckets: account %d out of keyset order", buckets, i)
		}
		require.Len(t, set, accounts)
		sets = append(sets, set)
	}
	require.Equal(t, sets[0], sets[1])
}
