package riverslot_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

func TestBuckets(t *testing.T) {
	t.Parallel()

	t.Run("DefaultIsOneByte", func(t *testing.T) {
		t.Parallel()
		s, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{validTask()}})
		require.NoError(t, err)
		info, err := s.Task("transactions")
		require.NoError(t, err)
		require.Equal(t, slotplan.Buckets, info.Plan.Buckets)
		require.Equal(t, 128, info.Plan.Slots)
	})

	t.Run("TwoByteDay", func(t *testing.T) {
		t.Parallel()
		task := validTask()
		task.Buckets = riverslot.BucketsTwoByte
		task.Phase = 0.25
		s, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{task}})
		require.NoError(t, err)
		info, err := s.Task("transactions")
		require.NoError(t, err)
		require.Equal(t, 65536, info.Plan.Buckets)
		require.Equal(t, 1024, info.Plan.Slots)
		require.Equal(t, "1m24.375s", info.Plan.SlotDuration.String())
		require.Equal(t, 256, info.Shift)
		require.Contains(t, info.PlanID, "/b65536/+256")
		require.Equal(t, 10*time.Second, info.Lead)
	})

	t.Run("OtherCountsRefused", func(t *testing.T) {
		t.Parallel()
		for _, buckets := range []int{-1, 1, 128, 512, 4096, 65535, 1 << 24} {
			task := validTask()
			task.Buckets = buckets
			_, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{task}})
			require.ErrorContains(t, err, "Buckets must be 256 (one UUID byte, the default) or 65536 (two bytes, finer slots), got", "buckets %d", buckets)
			require.NotContains(t, err.Error(), "Cycle", "a valid Cycle is not blamed")
		}
	})

	t.Run("OppositeNeedsSameBuckets", func(t *testing.T) {
		t.Parallel()
		a, b := validTask(), validTask()
		b.Name, b.OppositeOf, b.Buckets = "reports", "transactions", riverslot.BucketsTwoByte
		_, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{a, b}})
		require.ErrorContains(t, err, `Buckets must equal the Buckets of task "transactions" (256) to stay opposite it, got 65536`)

		a.Buckets = riverslot.BucketsTwoByte
		s, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{a, b}})
		require.NoError(t, err)
		info, err := s.Task("reports")
		require.NoError(t, err)
		require.Equal(t, 512, info.Shift, "half of 1,024 slots")
	})
}

// TestBucketsIndexes: CreateIndexes creates the index of each bucket count
// its tasks use on a table, Check names the one a task misses, and neither
// touches the other count's index.
func TestBucketsIndexes(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)

	fine := validTask()
	fine.Name, fine.Schema, fine.Buckets = "fine", schema, riverslot.BucketsTwoByte
	logger, records := riverslottest.RecordingLogger(slog.LevelWarn)
	s, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{fine}, Logger: logger})
	require.NoError(t, err)

	indexes := func() []string {
		rows, err := pool.Query(ctx, "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'accounts' AND indexname LIKE '%riverslot%' ORDER BY 1", schema)
		require.NoError(t, err)
		var names []string
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			names = append(names, n)
		}
		require.NoError(t, rows.Err())
		return names
	}

	require.NoError(t, s.Check(ctx))
	missing := records.Find(missingIndex)
	require.Len(t, missing, 1)
	require.Equal(t, sqlbucket.IndexDDLFor(schema, "accounts", "id", slotplan.BucketsTwoByte), missing[0]["ddl"].String())

	require.NoError(t, s.CreateIndexes(ctx))
	require.Equal(t, []string{"accounts_id_riverslot_bucket2_idx"}, indexes())
	require.NoError(t, s.Check(ctx))
	require.Len(t, records.Find(missingIndex), 1, "no new warning once the index exists")

	coarse := validTask()
	coarse.Name, coarse.Schema = "coarse", schema
	both, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{fine, coarse}, Logger: logger})
	require.NoError(t, err)
	require.NoError(t, both.CreateIndexes(ctx))
	require.Equal(t, []string{"accounts_id_riverslot_bucket2_idx", "accounts_id_riverslot_bucket_idx"}, indexes())
}

const missingIndex = "riverslot: bucket index missing; per-slot selection will scan the whole table. Create it with Scheduler.CreateIndexes or sqlbucket.IndexDDL"
