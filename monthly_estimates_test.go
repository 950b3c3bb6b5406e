package riverslot_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// february is the shortest month, in seconds: the month whose rate and
// rows the estimates of a calendar-month task assume.
const february = 28 * 24 * 3600.0

// TestRowBudgetMonthly: a calendar-month task's row budget counts
// February's (28 days of 28 daily slots, the most rows), not the 31 days
// of its plan's shape.
func TestRowBudgetMonthly(t *testing.T) {
	t.Parallel()
	s, err := riverslot.New(riverslottest.Pool(t), &riverslot.Config{Tasks: []riverslot.Task{{
		Name: "bills", Monthly: true, Table: "accounts", Sync: noopSync,
	}}})
	require.NoError(t, err)
	info, err := s.Task("bills")
	require.NoError(t, err)
	require.NotNil(t, info.Month)
	require.Equal(t, 10*time.Second, info.Lead)
	// Worked out by hand. 24 h retention: the window is 10 + 86,400 (a
	// day's slot) + 86,400 = 172,810 s, 172,810 / 2,419,200 (28 days) =
	// 0.0714327 cycles; 100M x 0.0714327 = 7,143,270 sync jobs
	// (truncated), and at least one month of per-slot jobs, 28 days + 1:
	// 7,143,299. (Over 31 days: 6,451,986 + 32.)
	require.EqualValues(t, 7_143_299, riverslot.RowBudget(100_000_000, info, 24*time.Hour))
}

// TestCheckStartRateMonthly: the start-rate warning of a calendar-month
// task weighs February's rate (17.5M accounts in 28 days: 7.23 a second,
// above 70% of one worker's 10), where 31 days (6.53 a second) would not
// warn.
func TestCheckStartRateMonthly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const warning = "riverslot: the task's sync queue cannot start its syncs as fast as the cycle asks on one node: a River queue starts at most MaxWorkers x 10 jobs a second (it fetches at most MaxWorkers per 100 ms fetch cooldown), fewer with longer syncs; raise MaxWorkers, lengthen Cycle, or run more nodes (see docs/simulate.md)"
	logger, records := riverslottest.RecordingLogger(slog.LevelWarn)
	s, err := riverslot.New(riverslottest.Pool(t), &riverslot.Config{Logger: logger, Tasks: []riverslot.Task{{
		Name: "bills", Monthly: true, Table: "accounts", Sync: noopSync,
	}}})
	require.NoError(t, err)
	require.NoError(t, s.Configure(&river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}}))
	require.NoError(t, s.CheckStartRate(ctx, "bills", 17_500_000))
	warned := records.Find(warning)
	require.Len(t, warned, 1)
	require.EqualValues(t, 7, warned[0]["syncs_per_second_needed"].Float64(), "17.5M / 2,419,200 s = 7.23, rounded")
	require.EqualValues(t, 2, warned[0]["max_workers_suggested"].Int64(), "7.23 / (0.7 x 10), rounded up")
}

// TestUpstreamBudgetsMonthly: the upstream budget of a calendar-month
// task needs February's rates: its accounts over 28 days, and its busiest
// 1/31 of the buckets over that share of 28 days (counted here from the
// ids); Check fails a rate between the 28-day and the 31-day average.
func TestUpstreamBudgetsMonthly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	const n = 20_000
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", n)
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "ALTER TABLE "+table+" ADD COLUMN bank text NOT NULL DEFAULT 'big'")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "VACUUM ANALYZE "+table)
	require.NoError(t, err)
	require.NoError(t, riverslot.Migrate(ctx, pool, schema))

	// The 65,536 buckets in 31 groups of 2,115 (the last of 2,086), each
	// due over its share of February.
	const per = (65536 + 30) / 31
	groups := make([]float64, 31)
	for _, id := range ids {
		groups[(int(id[15])*256+int(id[14]))/per]++
	}
	var busiest float64
	for g, c := range groups {
		size := min(per, 65536-g*per)
		busiest = max(busiest, c/(february*float64(size)/65536))
	}
	average := n / february

	scheduler := func(t *testing.T, rate float64) *riverslot.Scheduler {
		t.Helper()
		s, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
			Name: "bills", Monthly: true, Schema: schema, Table: "accounts", Upstream: "bank",
			Limits: riverslot.UpstreamLimits{Rate: rate}, Sync: noopSync,
		}}})
		require.NoError(t, err)
		require.NoError(t, s.Configure(&river.Config{Schema: schema}))
		return s
	}
	budgets, err := scheduler(t, 1).UpstreamBudgets(ctx, "bills")
	require.NoError(t, err)
	require.Len(t, budgets, 1)
	require.EqualValues(t, n, budgets[0].Accounts)
	require.InEpsilon(t, average, budgets[0].AverageRate, 1e-9, "20,000 accounts over 28 days")
	require.InEpsilon(t, busiest, budgets[0].NeedRate, 1e-9, "the busiest group over its share of 28 days")

	// Between the 31-day average (0.00747/s) and February's (0.00827/s):
	// February's accounts do not fit.
	rate := n / (29.5 * 24 * 3600)
	err = scheduler(t, rate).Check(ctx)
	var be *riverslot.UpstreamBudgetError
	require.True(t, errors.As(err, &be), "Check: %v", err)
	require.Len(t, be.Over, 1)
	require.InEpsilon(t, average, be.Over[0].AverageRate, 1e-9)
}
