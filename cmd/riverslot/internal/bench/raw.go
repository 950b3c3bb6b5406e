package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/internal/riverjob"
)

// rawQueue is the queue RawInsert's jobs go to; no client works it.
const rawQueue = "riverslot_bench_raw"

// RawInsert times River's own InsertManyFastTx of n jobs carrying the four
// fields of a sync job (task, account, cycle, slot: no NotAfter, no plan)
// into schema's river_job, in batches of batchSize, one transaction each,
// as a fan-out commits them, then deletes them. It is the baseline of a
// fan-out measured in a live cycle (riverslot demo --fanout-baseline):
// the same table, with whatever it holds at the time.
func RawInsert(ctx context.Context, pool *pgxpool.Pool, schema string, n, batchSize int) (time.Duration, error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	if err != nil {
		return 0, err
	}
	start := time.Now().Truncate(time.Second).Add(time.Hour).UTC()
	opts := &river.InsertOpts{Queue: rawQueue, Priority: 2, MaxAttempts: 5, ScheduledAt: start}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		id := uuid.New()
		params[i] = river.InsertManyParams{Args: noopArgs{Task: "bench", AccountID: id, CycleStart: start, Slot: int(id[15]) / 2}, InsertOpts: opts}
	}
	jobs := riverjob.QualifiedTable(schema)
	// An earlier run killed before its cleanup left its jobs: no client
	// works their queue.
	if _, err := pool.Exec(ctx, "DELETE FROM "+jobs+" WHERE queue = $1", rawQueue); err != nil {
		return 0, err
	}
	defer func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DELETE FROM "+jobs+" WHERE queue = $1", rawQueue)
	}()
	begun := time.Now()
	for lo := 0; lo < n; lo += batchSize {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		if _, err := client.InsertManyFastTx(ctx, tx, params[lo:min(lo+batchSize, n)]); err != nil {
			_ = tx.Rollback(ctx)
			return 0, fmt.Errorf("error inserting the raw baseline's jobs: %w", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, err
		}
	}
	return time.Since(begun), nil
}
