package riverslot_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestRecentFailures: a task's discarded and cancelled per-slot and sync
// jobs are listed newest first with their last error, slot, account and
// cycle; completed jobs and other tasks' are not; limit bounds the list.
func TestRecentFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	task := validTask()
	task.Schema = schema
	other := validTask()
	other.Name, other.Schema = "reports", schema
	s, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{task, other}})
	require.NoError(t, err)
	_, err = s.RecentFailures(ctx, "transactions", 0)
	require.ErrorContains(t, err, "call Configure before Status")
	require.NoError(t, s.Configure(&river.Config{Schema: schema}))

	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	account := uuid.New()
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	for _, j := range []struct {
		kind, state, task string
		args              string
		ago               time.Duration
		err               string
	}{
		{"riverslot_sync", "discarded", "transactions", `{"account_id": "` + account.String() + `", "slot": 7}`, time.Minute, "upstream said no"},
		{"riverslot_perslot", "cancelled", "transactions", `{"slot": 3}`, 2 * time.Minute, "cancelled by an operator"},
		{"riverslot_sync", "completed", "transactions", `{"account_id": "` + uuid.NewString() + `", "slot": 1}`, 0, ""},
		{"riverslot_sync", "discarded", "reports", `{"account_id": "` + uuid.NewString() + `", "slot": 1}`, 0, "not this task"},
	} {
		_, err := pool.Exec(ctx, `INSERT INTO `+jobs+` (args, kind, max_attempts, priority, queue, state, scheduled_at, finalized_at, attempt, errors)
			VALUES ($1::jsonb || jsonb_build_object('task', $2::text, 'cycle_start', $3::text), $4, 5, 1, 'default', $5, now(), now() - $6::interval, 5,
				ARRAY[jsonb_build_object('at', now(), 'attempt', 5, 'error', $7::text)])`,
			j.args, j.task, start.Format(time.RFC3339Nano), j.kind, j.state, j.ago.String(), j.err)
		require.NoError(t, err)
	}

	failed, err := s.RecentFailures(ctx, "transactions", 0)
	require.NoError(t, err)
	require.Len(t, failed, 2, "the task's discarded and cancelled jobs only")
	sync, slot := failed[0], failed[1]
	require.Equal(t, "riverslot_sync", sync.Kind, "newest first")
	require.Equal(t, "discarded", sync.State)
	require.Equal(t, account, sync.AccountID)
	require.Equal(t, 7, sync.Slot)
	require.True(t, sync.CycleStart.Equal(start), "cycle %s", sync.CycleStart)
	require.Equal(t, "upstream said no", sync.Error)
	require.Positive(t, sync.JobID)
	require.Equal(t, "riverslot_perslot", slot.Kind)
	require.Equal(t, "cancelled", slot.State)
	require.Equal(t, uuid.Nil, slot.AccountID)
	require.Equal(t, 3, slot.Slot)
	require.Equal(t, "cancelled by an operator", slot.Error)
	require.True(t, slot.FinalizedAt.Before(sync.FinalizedAt))

	failed, err = s.RecentFailures(ctx, "transactions", 1)
	require.NoError(t, err)
	require.Len(t, failed, 1)
	_, err = s.RecentFailures(ctx, "transactions", riverslot.FailuresLimitMax+1)
	require.ErrorContains(t, err, "limit must be between 1 and 100, got 101")
	_, err = s.RecentFailures(ctx, "payroll", 0)
	require.ErrorContains(t, err, `no task named "payroll"`)
}
