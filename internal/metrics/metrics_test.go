package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A nil provider and a nil *Instruments record nothing and never panic: the
// tiers call them unconditionally.
func TestNoProvider(t *testing.T) {
	t.Parallel()
	in, err := New(nil)
	require.NoError(t, err)
	ctx := context.Background()
	for _, in := range []*Instruments{in, nil} {
		in.BatchCommitted(ctx, "t", 1, 1, 1)
		in.FanOutDone(ctx, "t", time.Second, 10)
		in.SlotStarted(ctx, "t", 0, 1, time.Now(), time.Now())
		in.SlotStarted(ctx, "t", 0, 2, time.Now(), time.Now())
		in.SyncStarted(ctx, "t", time.Now(), time.Now())
	}
}

func TestRecords(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	in, err := New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	ctx := context.Background()
	now := time.Now()
	in.BatchCommitted(ctx, "t", 5, 2, 0)
	in.BatchCommitted(ctx, "t", 3, 0, 4)
	in.SyncStarted(ctx, "t", now.Add(-1500*time.Millisecond), now)
	in.SyncStarted(ctx, "t", now.Add(time.Second), now) // clock skew: 0, not negative
	in.SlotStarted(ctx, "t", 3, 1, now.Add(-2*time.Second), now)
	in.SlotStarted(ctx, "t", 3, 2, now, now)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]metricdata.Aggregation{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		got[m.Name] = m.Data
	}
	require.Equal(t, int64(8), got[SyncEnqueued].(metricdata.Sum[int64]).DataPoints[0].Value)
	require.Equal(t, int64(2), got[LateSpread].(metricdata.Sum[int64]).DataPoints[0].Value)
	require.Equal(t, int64(4), got[LateSkipped].(metricdata.Sum[int64]).DataPoints[0].Value)
	late := got[SyncLateness].(metricdata.Histogram[float64]).DataPoints[0]
	require.Equal(t, uint64(2), late.Count)
	require.InDelta(t, 1.5, late.Sum, 1e-9)
	lag := got[SlotLag].(metricdata.Histogram[float64]).DataPoints[0]
	require.Equal(t, uint64(1), lag.Count) // first attempts only
	require.InDelta(t, 2.0, lag.Sum, 1e-9)
	require.Equal(t, int64(1), got[SlotRetries].(metricdata.Sum[int64]).DataPoints[0].Value)
	_, recorded := got[FanOutDuration]
	require.False(t, recorded, "no fan-out finished")
}

// SetShard labels every measurement with the node's shard, beside the
// task; without it, no shard label.
func TestShardLabel(t *testing.T) {
	t.Parallel()
	for _, shard := range []string{"eu", ""} {
		reader := sdkmetric.NewManualReader()
		in, err := New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
		require.NoError(t, err)
		in.SetShard(shard)
		ctx := context.Background()
		in.BatchCommitted(ctx, "t", 5, 0, 0)
		in.SyncSkipped(ctx, "t", "stale")
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		for _, m := range rm.ScopeMetrics[0].Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				v, has := dp.Attributes.Value("shard")
				require.Equal(t, shard != "", has, "%s", m.Name)
				if has {
					require.Equal(t, shard, v.AsString(), m.Name)
				}
				task, _ := dp.Attributes.Value("task")
				require.Equal(t, "t", task.AsString())
			}
		}
	}
	var nilIn *Instruments
	nilIn.SetShard("eu") // no panic
}
