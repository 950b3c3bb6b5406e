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
	require.ErrorContains(t, err, "raise their rate (riverslot upstream set --key K --rate R, or Task.Limits.Rate)")

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
