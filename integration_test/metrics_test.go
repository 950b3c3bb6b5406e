package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/metrics"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestMetrics runs a cycle that began 25 s ago (so its first slots are too
// late and skipped, the next ones spread, the rest on time), makes one slot's
// first fan-out attempt fail, and checks every metric against counts taken
// from river_job and the accounts table.
func TestMetrics(t *testing.T) {
	parallel(t)

	const accounts = 2000
	ctx, b := setup(t, accounts)
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	accountsTable := pgx.Identifier{b.schema, "accounts"}.Sanitize()
	_, err := b.pool.Exec(ctx, "UPDATE "+accountsTable+" SET active = false WHERE id = ANY($1)", b.ids[:200])
	require.NoError(t, err)

	offset, start := offsetForStartIn(40*time.Second, -25*time.Second)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.Background())) })
	scheduler, err := riverslot.New(b.pool, &riverslot.Config{
		Logger: riverslottest.Logger(t), MeterProvider: provider,
		Tasks: []riverslot.Task{{
			Name: "transactions", Cycle: 40 * time.Second, TriggerOffset: offset, Schema: b.schema, Table: "accounts", Filter: "active", Sync: b.recordSync(),
		}},
	})
	require.NoError(t, err)
	info := taskInfo(t, scheduler, "transactions")
	slot := info.Plan.SlotDuration // 5 s

	// Slot 7's first fan-out attempt fails at COMMIT, after its inserts
	// succeeded: a deferred trigger raises for the first row it checks (a
	// sequence is not rolled back, so only the first call sees 1). Counting
	// before the commit would count that batch.
	seq := pgx.Identifier{b.schema, "once"}.Sanitize()
	fn := pgx.Identifier{b.schema, "fail_at_commit"}.Sanitize()
	_, err = b.pool.Exec(ctx, `
		CREATE SEQUENCE `+seq+`;
		CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('`+seq+`') = 1 THEN RAISE EXCEPTION 'slot 7 fails at commit once'; END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON `+jobs+` DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
			WHEN (NEW.kind = 'riverslot_sync' AND NEW.args->>'slot' = '7') EXECUTE FUNCTION `+fn+`();`)
	require.NoError(t, err)

	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	_, err = scheduler.EnqueueCycle(ctx, client, "transactions", start)
	require.NoError(t, err)
	waitFor(t, 90*time.Second, "every slot fanned out and every sync job finished", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", perslot.Kind) == int64(info.Plan.Slots) &&
			b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state <> 'completed'", syncjob.Kind) == 0
	})

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	byName := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, metrics.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			byName[m.Name] = m.Data
		}
	}
	task := attribute.NewSet(attribute.String("task", "transactions"))
	sum := func(name string) int64 {
		t.Helper()
		data, ok := byName[name]
		if !ok {
			return 0 // never recorded
		}
		s := data.(metricdata.Sum[int64])
		require.True(t, s.IsMonotonic, name)
		var n int64
		for _, p := range s.DataPoints {
			n += p.Value
		}
		return n
	}
	count := func(where string, args ...any) int64 {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_sync' AND "+where, args...)
	}

	rows, err := b.pool.Query(ctx, "SELECT (args->>'slot')::int, attempt, coalesce(metadata->>'output', '') || ' at +' || extract(epoch FROM attempted_at - (args->>'cycle_start')::timestamptz)::text FROM "+jobs+" WHERE kind = $1 ORDER BY 1", perslot.Kind)
	require.NoError(t, err)
	for rows.Next() {
		var s, a int
		var out string
		require.NoError(t, rows.Scan(&s, &a, &out))
		t.Logf("slot %d attempt %d output %s", s, a, out)
	}
	require.NoError(t, rows.Err())
	active := b.count(ctx, t, "SELECT count(*) FROM "+accountsTable+" WHERE active")
	enqueued := count("true")
	require.Equal(t, enqueued, sum(metrics.SyncEnqueued))
	// Skipped: the active accounts the cycle did not enqueue (its first
	// slots were more than half a cycle late).
	require.Positive(t, active-enqueued)
	require.Equal(t, active-enqueued, sum(metrics.LateSkipped))
	// Spread: sync jobs scheduled after the end of their own slot.
	spread := count("scheduled_at >= (args->>'cycle_start')::timestamptz + ((args->>'slot')::int + 1) * $1::interval", slot)
	require.Positive(t, spread)
	require.Equal(t, spread, sum(metrics.LateSpread))

	// Lateness: one observation per sync start, summing to attempted_at -
	// scheduled_at over the completed sync jobs.
	lateness := byName[metrics.SyncLateness].(metricdata.Histogram[float64])
	require.Len(t, lateness.DataPoints, 1)
	require.Equal(t, task, lateness.DataPoints[0].Attributes)
	require.EqualValues(t, count("state = 'completed'"), lateness.DataPoints[0].Count)
	var dbLateness float64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT coalesce(sum(greatest(extract(epoch FROM attempted_at - scheduled_at), 0)), 0)::float8 FROM "+jobs+
		" WHERE kind = 'riverslot_sync'").Scan(&dbLateness))
	require.InDelta(t, dbLateness, lateness.DataPoints[0].Sum, 0.001*float64(enqueued)+0.01)

	// Fan-outs: one per slot, their accounts adding up to the active ones.
	accountsPerSlot := byName[metrics.FanOutAccounts].(metricdata.Histogram[int64])
	require.EqualValues(t, info.Plan.Slots, accountsPerSlot.DataPoints[0].Count)
	require.Equal(t, active, accountsPerSlot.DataPoints[0].Sum)
	duration := byName[metrics.FanOutDuration].(metricdata.Histogram[float64])
	require.EqualValues(t, info.Plan.Slots, duration.DataPoints[0].Count)
	lag := byName[metrics.SlotLag].(metricdata.Histogram[float64])
	require.EqualValues(t, info.Plan.Slots, lag.DataPoints[0].Count) // first attempts only
	// The cycle began at least 25 s before its bootstrap: slot 0's per-slot
	// job was due 25 s + Lead before it started.
	maxLag, ok := lag.DataPoints[0].Max.Value()
	require.True(t, ok)
	require.Greater(t, maxLag, 25.0)

	// Retries: slot 7's second attempt, and river_job agrees.
	retries := byName[metrics.SlotRetries].(metricdata.Sum[int64])
	require.Len(t, retries.DataPoints, 1)
	require.Equal(t, int64(1), retries.DataPoints[0].Value)
	require.Equal(t, attribute.NewSet(attribute.String("task", "transactions"), attribute.Int("slot", 7)), retries.DataPoints[0].Attributes)
	require.Equal(t, int64(2), b.count(ctx, t, "SELECT attempt FROM "+jobs+" WHERE kind = $1 AND (args->>'slot')::int = 7", perslot.Kind))
}
