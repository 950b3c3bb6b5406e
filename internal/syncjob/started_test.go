package syncjob_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/riverslot/riverslot/internal/metrics"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestSyncStartedFirstRunOnly: a sync's start lateness is measured on the
// job's first run only, whatever its metadata holds: a job snoozed once
// (its attempt given back) is measured once, not again when it runs after
// the snooze; a job whose application metadata mentions "snoozes" is
// measured (the worker read River's unpublished metadata key, and took any
// such text for a snooze).
func TestSyncStartedFirstRunOnly(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 2)
	snoozed, noted := ids[0], ids[1]
	reader := sdkmetric.NewManualReader()
	in, err := metrics.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	spec := riverslottest.Spec(t, "reports", schema, "accounts", "", 2*time.Minute, 100)
	spec.Metrics = in

	var (
		mu    sync.Mutex
		calls = map[uuid.UUID]int{}
	)
	w := syncjob.NewWorker(pool, riverslottest.Logger(t))
	w.AddTask(spec, func(_ context.Context, id uuid.UUID, _ *river.Job[syncjob.Args]) error {
		mu.Lock()
		defer mu.Unlock()
		calls[id]++
		if id == snoozed && calls[id] == 1 {
			return river.JobSnooze(0)
		}
		return nil
	})
	client, events := startWorker(ctx, t, pool, schema, w, 2)

	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	want := map[int64]bool{}
	res, err := client.Insert(ctx, syncjob.NewArgs("reports", snoozed, start, 0), &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	want[res.Job.ID] = true
	res, err = client.Insert(ctx, syncjob.NewArgs("reports", noted, start, 0), &river.InsertOpts{MaxAttempts: 1, Metadata: []byte(`{"note": "snoozes"}`)})
	require.NoError(t, err)
	want[res.Job.ID] = true
	timeout := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case ev := <-events:
			if !want[ev.Job.ID] || ev.Job.FinalizedAt == nil {
				continue
			}
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
			delete(want, ev.Job.ID)
		case <-timeout:
			t.Fatalf("sync jobs %v unfinished after 30 s", want)
		}
	}
	mu.Lock()
	require.Equal(t, map[uuid.UUID]int{snoozed: 2, noted: 1}, calls, "the snoozed job ran twice")
	mu.Unlock()

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	var started uint64
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == metrics.SyncLateness {
			started = m.Data.(metricdata.Histogram[float64]).DataPoints[0].Count
		}
	}
	require.EqualValues(t, 2, started, "one start per job: the snoozed one's first run and the noted one's")
}
