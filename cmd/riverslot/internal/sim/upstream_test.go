package sim

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The accounts per bank follow BankBounds: counted here from the fleet's
// first bytes, and the shares fall with the bank's index.
func TestBankBounds(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 23, 256} {
		bounds := BankBounds(n)
		require.Len(t, bounds, n)
		require.Equal(t, 256, bounds[n-1])
		for k := range n {
			lo := 0
			if k > 0 {
				lo = bounds[k-1]
			}
			require.Greater(t, bounds[k], lo, "bank %d of %d holds at least one first-byte value", k, n)
		}
	}
	bounds := BankBounds(23)
	require.Greater(t, bounds[0], 2*(bounds[1]-bounds[0])-2, "bank-00 about twice bank-01")
}

// upstreamRun simulates one 120 s cycle (8 slots of 15 s) of 6,000
// accounts over 23 banks at rate calls a second, burst 2, 3 in flight,
// each call 10 ms, with down as the outage.
func upstreamRun(t *testing.T, rate float64, down *Down) *Result {
	t.Helper()
	return run(t, Config{Accounts: 6000, Cycle: 120 * time.Second, SyncDuration: Dist{Kind: "fixed", A: 10 * time.Millisecond},
		Upstreams: Upstreams{Count: 23, Rate: rate, Burst: 2, Concurrency: 3, Down: down}})[0]
}

// The limiter holds every bank to its rate and concurrency; banks whose
// accounts fit in a cycle at their rate have every account synced once;
// the one that does not (bank-00: about 1,600 accounts need 13 a second,
// the rate is 8) syncs at most its rate over the time its syncs may wait
// (to their NotAfter, half a cycle after the cycle), and reports the rest
// as skipped: none is lost.
func TestUpstreamLimitsHold(t *testing.T) {
	t.Parallel()
	const rate = 8
	r := upstreamRun(t, rate, nil)
	require.Len(t, r.Upstreams, 23)
	var total int64
	for _, u := range r.Upstreams {
		total += u.Accounts
		require.LessOrEqual(t, float64(u.MaxPerSecond), rate+2.0, "%s: calls in one second above rate + burst", u.Key)
		require.LessOrEqual(t, u.MaxInFlight, int64(3), "%s: calls in flight", u.Key)
		require.Equal(t, u.Accounts, u.Synced+u.Skipped, "%s: each account synced or reported skipped", u.Key)
		require.Zero(t, u.Probes, "%s: no outage, no probe", u.Key)
		require.Zero(t, u.Deferred, "%s", u.Key)
		if fits := float64(u.Accounts)/120 <= rate*0.8; fits {
			require.Zero(t, u.Skipped, "%s: %d accounts fit in a cycle at %d/s", u.Key, u.Accounts, rate)
		}
	}
	require.EqualValues(t, 6000, total)
	big := r.Upstreams[0]
	require.Greater(t, float64(big.Accounts), rate*180.0, "bank-00 does not fit in a cycle and the half cycle its syncs may wait")
	require.Positive(t, big.Skipped)
	require.LessOrEqual(t, float64(big.Synced), rate*180+2.0, "at most the rate over the cycle and the half cycle its syncs may wait")
	require.Greater(t, float64(big.Synced), 0.8*rate*180, "the rate is used")
}

// One bank down for 40% of the cycle: its calls while down are the
// failures that opened its breaker, the calls in flight then and one probe
// a cooldown; its accounts are synced after it recovers or reported
// skipped (none lost); every other bank is unaffected: every account
// synced, and lateness p99 no worse (within a poll) than without the
// outage.
func TestUpstreamOutage(t *testing.T) {
	t.Parallel()
	const down = 3
	base := upstreamRun(t, 20, nil) // every bank fits in a cycle at 20/s
	r := upstreamRun(t, 20, &Down{Bank: down, From: 0.2, To: 0.6})
	cooldown := BreakerCooldown(120 * time.Second)
	outage := time.Duration(0.4 * float64(120*time.Second))
	for k, u := range r.Upstreams {
		b := base.Upstreams[k]
		if k == down {
			continue
		}
		require.Equal(t, u.Accounts, u.Synced, "%s: every account synced", u.Key)
		require.Equal(t, b.Synced, u.Synced, "%s", u.Key)
		require.Zero(t, u.Probes+u.Deferred, "%s", u.Key)
		require.LessOrEqual(t, u.LatenessP99Seconds, b.LatenessP99Seconds+0.3, "%s: lateness p99 as without the outage (within a poll)", u.Key)
	}
	d := r.Upstreams[down]
	failed := d.Calls - d.Synced
	wantProbes := float64(outage / cooldown)
	t.Logf("%s: %d accounts, %d calls, %d failed, %d probes (outage %s / cooldown %s = %.1f), %d deferred, %d skipped, lateness p99 %.3fs",
		d.Key, d.Accounts, d.Calls, failed, d.Probes, outage, cooldown, wantProbes, d.Deferred, d.Skipped, d.LatenessP99Seconds)
	require.Equal(t, d.Accounts, d.Synced+d.Skipped, "each account synced or reported skipped")
	require.InDelta(t, wantProbes, float64(d.Probes), 2, "one probe a cooldown while down")
	require.LessOrEqual(t, failed, int64(BreakerThreshold)+d.Probes+3, "while down: the failures that open the breaker, calls in flight, probes")
	require.Positive(t, d.Deferred)
	require.Greater(t, float64(d.Synced), 0.6*float64(d.Accounts), "synced after it recovered")
	require.Greater(t, d.LatenessP99Seconds, (outage / 2).Seconds(), "deferred syncs ran after the outage")
}

// Simulate refuses upstream settings it cannot model, naming the field.
func TestUpstreamConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		up   Upstreams
		strs []Strategy
		want string
	}{
		{Upstreams{Count: 2000}, nil, "Upstreams.Count must be 0 (none) to 1000"},
		{Upstreams{Count: 2, Rate: math.NaN()}, nil, "Upstreams.Rate, Burst and Concurrency"},
		{Upstreams{Count: 2, Down: &Down{Bank: 2, From: 0.1, To: 0.2}}, nil, "Upstreams.Down must name one of the 2 upstreams"},
		{Upstreams{Count: 2}, []Strategy{StrategyNaive}, "use Strategies riverslot only"},
		{Upstreams{Rate: 3}, nil, "need Upstreams.Count"},
	} {
		cfg := Config{Accounts: 10, Cycle: 64 * time.Second, Upstreams: c.up, Strategies: c.strs}
		cfg.setDefaults()
		require.ErrorContains(t, cfg.validate(), c.want)
	}
}
