package syncjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/internal/taskspec"
)

// SyncFunc is the application's work for one account. Returning an error
// makes River retry the job with its usual backoff, up to the task's
// MaxAttempts.
type SyncFunc func(ctx context.Context, accountID uuid.UUID, job *river.Job[Args]) error

// Worker works sync jobs for one or more tasks.
type Worker struct {
	river.WorkerDefaults[Args]

	logger *slog.Logger
	pool   *pgxpool.Pool
	tasks  map[string]workerTask
}

type workerTask struct {
	spec *taskspec.Spec
	sync SyncFunc
}

// NewWorker returns a sync worker. riverutil builds it.
func NewWorker(pool *pgxpool.Pool, logger *slog.Logger) *Worker {
	return &Worker{logger: logger, pool: pool, tasks: make(map[string]workerTask)}
}

// AddTask makes the worker serve the task of spec with sync.
func (w *Worker) AddTask(spec *taskspec.Spec, sync SyncFunc) {
	w.tasks[spec.Name] = workerTask{spec: spec, sync: sync}
}

// Register adds the worker to workers.
func (w *Worker) Register(workers *river.Workers) error {
	return river.AddWorkerSafely(workers, river.Worker[Args](w))
}

// Timeout returns the task's sync timeout.
func (w *Worker) Timeout(job *river.Job[Args]) time.Duration {
	if t, ok := w.tasks[job.Args.Task]; ok {
		return t.spec.SyncTimeout
	}
	return 0
}

// Work checks that the account still exists and matches the filter, then
// calls the task's SyncFunc.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	t, ok := w.tasks[job.Args.Task]
	if !ok {
		return river.JobCancel(fmt.Errorf("no riverslot task %q is registered in this process; register it or delete the job", job.Args.Task))
	}
	if job.Args.AccountID == uuid.Nil {
		return river.JobCancel(errors.New("sync job has no account_id"))
	}
	if job.Attempt == 1 && job.AttemptedAt != nil {
		// First attempts only: a retry's scheduled time is River's
		// backoff, not the account's time.
		t.spec.Metrics.SyncStarted(ctx, t.spec.Name, job.ScheduledAt, *job.AttemptedAt)
	}

	var exists bool
	if err := w.pool.QueryRow(ctx, t.spec.SQL.Exists, job.Args.AccountID).Scan(&exists); err != nil {
		return fmt.Errorf("error checking account %s of task %q: %w", job.Args.AccountID, t.spec.Name, err)
	}
	if !exists {
		w.logger.DebugContext(ctx, "riverslot: account gone or filtered out since fan-out; nothing to sync",
			slog.String("task", t.spec.Name), slog.String("account_id", job.Args.AccountID.String()))
		return nil
	}
	return t.sync(ctx, job.Args.AccountID, job)
}
