package main

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

// TestPlanUpstreamsConcurrency: plan --upstreams weighs an upstream as
// upstream check does, against min(Rate, Concurrency / latency). One bank
// of 800 accounts on a 64 s cycle needs 12.5 syncs a second: a rate of
// 15/s would carry it, 2 syncs in flight at 800 ms each (2.5/s) do not, so
// plan exits 1 naming the concurrency bound and the Concurrency that
// carries the cycle; with that Concurrency (by flag, or an operator's
// override over the flag) it exits 0. Without a latency plan says the
// concurrency limit was not weighed; a negative flag is refused.
func TestPlanUpstreamsConcurrency(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 800)
	_, err := pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, "accounts"}.Sanitize()+" ADD COLUMN bank text NOT NULL DEFAULT 'bank'")
	require.NoError(t, err)

	// What the bank needs and what its limits let through, from the
	// definitions: its accounts over the cycle; its busiest slot's
	// accounts over the slot (64 s is 64 slots of 1 s); Concurrency
	// syncs in flight, each taking latency, serve Concurrency / latency
	// a second.
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
	// 800 accounts over 64 slots is 12.5 a slot, which no slot can hold:
	// some slot has 13 or more.
	require.GreaterOrEqual(t, need, 13.0)
	served := func(concurrency int) float64 { return float64(concurrency) / latency.Seconds() }
	require.InDelta(t, 2.5, served(2), 1e-12)
	require.Less(t, served(2), average, "2 in flight cannot carry the cycle")
	require.Less(t, average, rate, "the rate alone would")
	// The least Concurrency that carries the cycle: average x latency,
	// rounded up. It carries exactly 12.5/s, below the rate: the
	// concurrency bound still binds, and the cycle fits.
	forCycle := int(math.Ceil(average*latency.Seconds() - 1e-9))
	require.Equal(t, 10, forCycle)
	require.InDelta(t, average, served(forCycle), 1e-9)

	planArgs := func(extra ...string) []string {
		args := []string{"plan", "--cycle", cycle.String(), "--task", "transactions", "--database-url", riverslottest.DatabaseURL(),
			"--pins-schema", schema, "--river-schema", schema, "--table", "accounts", "--upstreams", "bank", "--upstream-rate", fmt.Sprint(rate)}
		return append(args, extra...)
	}
	lat := []string{"--upstream-latency", latency.String()}
	row := func(concurrency int, fits, onTime string) string {
		return fmt.Sprintf(`(?m)^"bank"\s+800\s+12\.500\s+%s\s+15\s+%d\s+800ms\s+%s\s+concurrency\s+%s\s+%s$`,
			regexp.QuoteMeta(fmt.Sprintf("%.3f", need)), concurrency, regexp.QuoteMeta(fmt.Sprintf("%.4g", served(concurrency))), fits, onTime)
	}

	t.Run("ConcurrencyCannotCarryIt", func(t *testing.T) {
		t.Parallel()

		code, stdout, stderr := runCmd(t, planArgs(append(lat, "--upstream-concurrency", "2")...)...)
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stdout, "slots          64 = gcd(64, 256)", "the slots are printed first")
		require.Contains(t, stdout, "upstreams (bank) of task transactions against their limits, min(rate, concurrency / latency):")
		require.Regexp(t, `(?m)^UPSTREAM\s+ACCOUNTS\s+NEEDS/S \(CYCLE\)\s+NEEDS/S \(BUSIEST SLOT\)\s+RATE/S\s+CONCURRENCY\s+LATENCY\s+LIMIT/S\s+BOUND\s+FITS IN A CYCLE\s+BUSIEST SLOT ON TIME$`, stdout)
		require.Regexp(t, row(2, "NO", "NO"), stdout)
		require.Contains(t, stderr, fmt.Sprintf(`riverslot plan: 1 of 1 upstreams cannot sync their accounts in a cycle at their limits: "bank" (800 accounts need 12.5/s; concurrency bound: rate 15/s, concurrency 2 / 800ms a sync = 2.5/s; raise Concurrency to %d)`, forCycle))
	})

	t.Run("ConcurrencyCarriesIt", func(t *testing.T) {
		t.Parallel()

		code, stdout, stderr := runCmd(t, planArgs(append(lat, "--upstream-concurrency", fmt.Sprint(forCycle))...)...)
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, row(forCycle, "yes", "NO"), stdout)
		require.Contains(t, stdout, "1 upstream(s) fit in a cycle but not in their busiest slot")
		require.Empty(t, stderr)
	})

	t.Run("NoLatency", func(t *testing.T) {
		t.Parallel()

		// The concurrency limit cannot be weighed: the rate binds, and
		// plan says what latency 2 in flight carry the busiest slot at.
		code, stdout, stderr := runCmd(t, planArgs("--upstream-concurrency", "2")...)
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `(?m)^"bank"\s+800\s+12\.500\s+\S+\s+15\s+2\s+unknown\s+15\s+rate\s+yes\s`, stdout)
		require.Contains(t, stdout, "latency unknown: give --upstream-latency")
		longest := time.Duration(2 / need * float64(time.Second)).Round(time.Millisecond)
		require.Contains(t, stdout, fmt.Sprintf(`"bank": Concurrency 2 carries its busiest slot (%.4g/s) while a sync takes at most %s`, need, longest))
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()

		for _, c := range []struct {
			args []string
			want string
		}{
			{planArgs(append(lat, "--upstream-concurrency", "-1")...), "--upstream-concurrency must be 0 (no limit) or more; got -1"},
			{planArgs("--upstream-latency", "-1s", "--upstream-concurrency", "2"), "--upstream-latency must be a positive duration such as 800ms, or 0 for unknown; got -1s"},
		} {
			code, stdout, stderr := runCmd(t, c.args...)
			require.Equal(t, 2, code, "%v: %s", c.args, stderr)
			require.Contains(t, stderr, c.want)
			require.Empty(t, stdout, "refused before anything is printed")
		}
	})
}

// TestPlanUpstreamsOverrideWins: an operator's concurrency override for the
// bank (riverslot upstream set) wins over --upstream-concurrency, as it
// does for the limiter and for upstream check. Its own schema: the
// override would change TestPlanUpstreamsConcurrency's answers.
func TestPlanUpstreamsOverrideWins(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 800)
	_, err := pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, "accounts"}.Sanitize()+" ADD COLUMN bank text NOT NULL DEFAULT 'bank'")
	require.NoError(t, err)

	args := []string{"plan", "--cycle", "64s", "--task", "transactions", "--database-url", riverslottest.DatabaseURL(),
		"--pins-schema", schema, "--river-schema", schema, "--table", "accounts", "--upstreams", "bank",
		"--upstream-rate", "15", "--upstream-concurrency", "2", "--upstream-latency", "800ms"}
	code, _, stderr := runCmd(t, args...)
	require.Equal(t, 1, code, stderr)

	// 10 in flight at 800 ms carry 12.5/s, the cycle's 800 accounts over
	// 64 s (see TestPlanUpstreamsConcurrency).
	code, _, stderr = runCmd(t, "upstream", "set", "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--task", "transactions", "--key", "bank", "--concurrency", "10")
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr := runCmd(t, args...)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^"bank"\s+800\s+12\.500\s+\S+\s+15\s+10\s+800ms\s+12\.5\s+concurrency\s+yes\s`, stdout)
}
