package riverslot_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestCheckUpstreamBudget: Check of a rate-limited task fails with an
// *UpstreamBudgetError naming the upstream whose accounts need more than
// its rate over the cycle (how many, what rate), passes once an operator's
// override raises that rate, warns for an upstream that fits the cycle but
// not its busiest slot, and on a table above the sampling threshold
// estimates the counts from a sample. Not parallel: the sampling part
// lowers a package threshold.
func TestCheckUpstreamBudget(t *testing.T) {
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 30_000)
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "ALTER TABLE "+table+" ADD COLUMN bank text")
	require.NoError(t, err)
	// Two thirds of the first byte's values at big, the rest at small:
	// counted here from the ids, as the database will.
	_, err = pool.Exec(ctx, "UPDATE "+table+" SET bank = CASE WHEN get_byte(uuid_send(id), 0) < 171 THEN 'big' ELSE 'small' END")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "VACUUM ANALYZE "+table)
	require.NoError(t, err)
	count := map[string]int64{}
	for _, id := range ids {
		if id[0] < 171 {
			count["big"]++
		} else {
			count["small"]++
		}
	}
	const cycle = 120 * time.Second
	average := func(bank string) float64 { return float64(count[bank]) / cycle.Seconds() }
	require.Greater(t, average("big"), average("small"))
	rate := (average("big") + average("small")) / 2 // big does not fit, small does

	const warning = "riverslot: upstreams whose busiest slot needs more than their rate limit: their syncs wait in line, later than their place (riverslot upstream check lists them)"
	check := func(t *testing.T, rate float64) ([]map[string]slog.Value, error) {
		t.Helper()
		logger, records := riverslottest.RecordingLogger(slog.LevelWarn)
		s, err := riverslot.New(pool, &riverslot.Config{Logger: logger, Tasks: []riverslot.Task{{
			Name: "transactions", Cycle: cycle, Schema: schema, Table: "accounts", Upstream: "bank",
			Limits: riverslot.UpstreamLimits{Rate: rate}, Sync: noopSync,
		}}})
		require.NoError(t, err)
		require.NoError(t, s.Configure(&river.Config{Schema: schema}))
		err = s.Check(ctx)
		return records.Find(warning), err
	}
	require.NoError(t, riverslot.Migrate(ctx, pool, schema))

	_, err = check(t, rate)
	var be *riverslot.UpstreamBudgetError
	require.True(t, errors.As(err, &be), "Check: %v", err)
	require.Equal(t, "transactions", be.Task)
	require.Len(t, be.Over, 1)
	require.Equal(t, "big", be.Over[0].Key)
	require.Equal(t, count["big"], be.Over[0].Accounts)
	require.InDelta(t, average("big"), be.Over[0].AverageRate, 1e-9)
	require.False(t, be.Over[0].Sampled)
	require.ErrorContains(t, err, fmt.Sprintf(`upstream "big" has %d accounts, which need %.3g syncs/s, its rate limit is %.3g/s`, count["big"], average("big"), rate))
	require.ErrorContains(t, err, "raise their rate or concurrency (riverslot upstream set --key K --rate R --concurrency C, or Task.Limits)")

	// Without a rate nothing is counted, and nothing fails.
	_, err = check(t, 0)
	require.NoError(t, err)

	// Just above big's average: it fits the cycle, its busiest slot does
	// not (a hash never puts exactly the average in every slot).
	warned, err := check(t, average("big")*1.001)
	require.NoError(t, err)
	require.Len(t, warned, 1)
	require.EqualValues(t, 1, warned[0]["upstreams"].Int64())

	// An operator's override for big makes it fit.
	s, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: cycle, Schema: schema, Table: "accounts", Upstream: "bank", Limits: riverslot.UpstreamLimits{Rate: rate}, Sync: noopSync,
	}}})
	require.NoError(t, err)
	require.NoError(t, s.Configure(&river.Config{Schema: schema}))
	high := 2 * average("big") * 2
	require.NoError(t, s.SetUpstreamLimits(ctx, "transactions", "big", riverslot.UpstreamOverride{Rate: &high}))
	_, err = check(t, rate)
	require.NoError(t, err)
	require.NoError(t, s.SetUpstreamLimits(ctx, "transactions", "big", riverslot.UpstreamOverride{Clear: true}))

	// A table above the threshold is sampled (about a third of its
	// pages): an estimate, near the count. Half big's rate: over by more
	// than a sample's error.
	restore := riverslot.SetBudgetSampleRows(10_000)
	defer restore()
	_, err = check(t, average("big")/2)
	require.True(t, errors.As(err, &be), "Check: %v", err)
	require.Len(t, be.Over, 1)
	require.True(t, be.Over[0].Sampled)
	require.InEpsilon(t, count["big"], be.Over[0].Accounts, 0.25, "sampled estimate of big's accounts")
	require.NotEqual(t, count["big"], be.Over[0].Accounts, "a sample's estimate, not the count")
	require.ErrorContains(t, err, `upstream "big" has about `)
	// The same sample (REPEATABLE, the table unchanged) 10% over the rate:
	// within a sample's error, a warning.
	const near = "riverslot: upstreams that may not fit in a cycle at their rate limit (a sample's estimate within 25% of it); count them with riverslot upstream check"
	logger, records := riverslottest.RecordingLogger(slog.LevelWarn)
	s2, err := riverslot.New(pool, &riverslot.Config{Logger: logger, Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: cycle, Schema: schema, Table: "accounts", Upstream: "bank",
		Limits: riverslot.UpstreamLimits{Rate: be.Over[0].AverageRate / 1.1}, Sync: noopSync,
	}}})
	require.NoError(t, err)
	require.NoError(t, s2.Configure(&river.Config{Schema: schema}))
	require.NoError(t, s2.Check(ctx))
	require.Len(t, records.Find(near), 1)

	// A table never analyzed is not scanned: a warning says how to count.
	fresh := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, fresh, "accounts", 10)
	_, err = pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{fresh, "accounts"}.Sanitize()+" ADD COLUMN bank text")
	require.NoError(t, err)
	require.NoError(t, riverslot.Migrate(ctx, pool, fresh))
	logger, records = riverslottest.RecordingLogger(slog.LevelWarn)
	s3, err := riverslot.New(pool, &riverslot.Config{Logger: logger, Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: cycle, Schema: fresh, Table: "accounts", Upstream: "bank",
		Limits: riverslot.UpstreamLimits{Rate: 0.001}, Sync: noopSync,
	}}})
	require.NoError(t, err)
	require.NoError(t, s3.Configure(&river.Config{Schema: fresh}))
	var reltuples float64
	require.NoError(t, pool.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)", pgx.Identifier{fresh, "accounts"}.Sanitize()).Scan(&reltuples))
	if reltuples < 0 { // autovacuum may have analyzed it already
		require.NoError(t, s3.Check(ctx))
		require.Len(t, records.Find("riverslot: the accounts table was never analyzed, so Check does not count its upstreams (a whole-table scan); run ANALYZE on it, or riverslot upstream check before a deploy"), 1)
	}
}

// TestCheckUpstreamConcurrency: Check weighs an upstream's Concurrency at
// Limits.Latency a call, not only its Rate (issue 41: a bank of 800
// accounts needing 12.5 syncs/s, rate 15/s, 2 in flight at 800 ms a call
// lets 2.5/s through, and was said to fit). The bound that binds is
// named; an operator's concurrency override counts; without a latency the
// concurrency limit is not weighed.
func TestCheckUpstreamConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 800)
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "ALTER TABLE "+table+" ADD COLUMN bank text NOT NULL DEFAULT 'slow'")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE "+table)
	require.NoError(t, err)
	require.NoError(t, riverslot.Migrate(ctx, pool, schema))

	const cycle = 64 * time.Second // 800 accounts: 12.5 syncs/s
	check := func(t *testing.T, limits riverslot.UpstreamLimits) (*riverslot.Scheduler, error) {
		t.Helper()
		s, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
			Name: "transactions", Cycle: cycle, Schema: schema, Table: "accounts", Upstream: "bank", Limits: limits, Sync: noopSync,
		}}})
		require.NoError(t, err)
		require.NoError(t, s.Configure(&river.Config{Schema: schema}))
		return s, s.Check(ctx)
	}

	// The bank: the rate fits, the concurrency does not.
	slow := riverslot.UpstreamLimits{Rate: 15, Concurrency: 2, Latency: 800 * time.Millisecond}
	s, err := check(t, slow)
	var be *riverslot.UpstreamBudgetError
	require.True(t, errors.As(err, &be), "Check: %v", err)
	require.Len(t, be.Over, 1)
	over := be.Over[0]
	require.Equal(t, "slow", over.Key)
	require.EqualValues(t, 800, over.Accounts)
	require.Equal(t, riverslot.BoundConcurrency, over.Bound)
	require.InDelta(t, 2/0.8, over.ConcurrencyRate, 1e-9)
	require.InDelta(t, 2/0.8, over.Limit, 1e-9)
	require.InDelta(t, 800/cycle.Seconds(), over.AverageRate, 1e-9)
	require.ErrorContains(t, err, `upstream "slow" has 800 accounts, which need 12.5 syncs/s, its concurrency limit lets 2.5/s through (2 in flight at Limits.Latency a call)`)

	// UpstreamBudgets says the same without failing.
	budgets, err := s.UpstreamBudgets(ctx, "transactions")
	require.NoError(t, err)
	require.Len(t, budgets, 1)
	require.False(t, budgets[0].Fits)
	require.Equal(t, riverslot.BoundConcurrency, budgets[0].Bound)

	// Without a rate, a concurrency limit with a latency is still weighed.
	_, err = check(t, riverslot.UpstreamLimits{Concurrency: 2, Latency: 800 * time.Millisecond})
	require.True(t, errors.As(err, &be), "Check without a rate: %v", err)

	// Without a latency the concurrency limit cannot be weighed: the rate
	// alone fits.
	_, err = check(t, riverslot.UpstreamLimits{Rate: 15, Concurrency: 2})
	require.NoError(t, err)

	// Eleven in flight carry 13.75/s: the cycle's 12.5/s fits, bounded by
	// concurrency below the rate (15/s).
	s, err = check(t, riverslot.UpstreamLimits{Rate: 15, Concurrency: 11, Latency: 800 * time.Millisecond})
	require.NoError(t, err)
	budgets, err = s.UpstreamBudgets(ctx, "transactions")
	require.NoError(t, err)
	require.True(t, budgets[0].Fits)
	require.Equal(t, riverslot.BoundConcurrency, budgets[0].Bound)

	// An operator's concurrency override for the key wins over the task's
	// 2.
	twenty := 20
	require.NoError(t, s.SetUpstreamLimits(ctx, "transactions", "slow", riverslot.UpstreamOverride{Concurrency: &twenty}))
	_, err = check(t, slow)
	require.NoError(t, err)
	budgets, err = s.UpstreamBudgets(ctx, "transactions")
	require.NoError(t, err)
	require.Equal(t, 20, budgets[0].Concurrency)
	require.Equal(t, riverslot.BoundRate, budgets[0].Bound, "20 / 800ms = 25/s is above the rate")

	// Bad input names the field.
	_, err = riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: cycle, Schema: schema, Table: "accounts", Limits: riverslot.UpstreamLimits{Latency: -time.Second}, Sync: noopSync,
	}}})
	require.ErrorContains(t, err, "Limits.Latency must be 0 (unknown)")
}
