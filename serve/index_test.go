package serve_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/serve"
	"github.com/riverslot/riverslot/sqlbucket"
)

// TestFanOutReadsItsPeriod: each period's fan-out query (riverslot's page
// query of the period's task: its slot's buckets and the period's filter)
// is planned on that period's own index, not on the bucket index of every
// period's schedules: with 20,000 daily schedules and 200 of a minute, a
// minute's fan-out reads the minute's schedules only.
func TestFanOutReadsItsPeriod(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{}, time.Minute, 24*time.Hour)
	ctx := context.Background()
	pool, table := a.srv.Pool(), pgx.Identifier{a.srv.Schema(), serve.SchedulesTable}.Sanitize()
	def, err := a.srv.DefaultTenant(ctx)
	require.NoError(t, err)
	for _, p := range []struct {
		ms int64
		n  int
	}{{24 * 3600 * 1000, 20_000}, {60_000, 200}} {
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (id, tenant_id, url, method, period_ms, timeout_ms, retries, upstream)
SELECT gen_random_uuid(), $1, 'https://203.0.113.10/', 'POST', $2, 1000, 0, 'k' FROM generate_series(1, $3)`, def, p.ms, p.n)
		require.NoError(t, err)
	}
	require.NoError(t, a.srv.CreateIndexes(ctx))
	_, err = pool.Exec(ctx, `ANALYZE `+table)
	require.NoError(t, err)

	for _, tt := range []struct {
		period  time.Duration
		buckets int
		hi      int
	}{{time.Minute, 256, 15}, {24 * time.Hour, 65536, 63}} {
		expr := sqlbucket.ExprFor("id", tt.buckets)
		// The shape of riverslot's fan-out page query (taskspec.BuildSQL):
		// the slot's buckets, the task's filter, in bucket and id order.
		q := `SELECT id, ` + expr + ` FROM ` + table + ` WHERE ` + expr + ` BETWEEN 0 AND ` + strconv.Itoa(tt.hi) +
			` AND (deleted_at IS NULL AND NOT paused AND period_ms = ` + strconv.FormatInt(tt.period.Milliseconds(), 10) + `) ORDER BY ` + expr + `, id LIMIT 1000`
		var plan string
		require.NoError(t, pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+q).Scan(&plan))
		require.Contains(t, plan, serve.PeriodIndexName(tt.period), "period %s: %s", tt.period, plan)
	}
}
