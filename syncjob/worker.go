package syncjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/sqlbucket"
)

// SyncFunc is the application's work for one account. Returning an error
// makes River retry the job with its usual backoff, up to the task's
// MaxAttempts.
type SyncFunc func(ctx context.Context, accountID uuid.UUID, job *river.Job[Args]) error

// Task is what the sync worker needs to know about one task.
type Task struct {
	Name string

	// Schema, Table, IDColumn and Filter locate the account; see
	// riverutil.Task.
	Schema, Table, IDColumn, Filter string

	// Timeout bounds one SyncFunc call. Zero means River's client default.
	Timeout time.Duration

	// Sync is the application's work.
	Sync SyncFunc
}

// Worker works sync jobs of one kind for one or more tasks.
type Worker struct {
	river.WorkerDefaults[Args]

	kind   string
	logger *slog.Logger
	pool   *pgxpool.Pool
	tasks  map[string]*workerTask
}

type workerTask struct {
	Task

	existsSQL string
}

// NewWorker returns a worker for sync jobs of kind (KindDefault when empty).
func NewWorker(pool *pgxpool.Pool, kind string, logger *slog.Logger) *Worker {
	if kind == "" {
		kind = KindDefault
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Worker{kind: kind, logger: logger, pool: pool, tasks: make(map[string]*workerTask)}
}

// AddTask makes the worker serve task. It errors on a duplicate task name.
func (w *Worker) AddTask(task Task) error {
	if _, ok := w.tasks[task.Name]; ok {
		return fmt.Errorf("sync worker for kind %q already serves task %q", w.kind, task.Name)
	}
	if task.Sync == nil {
		return fmt.Errorf("task %q: Sync must be set", task.Name)
	}
	filter := ""
	if task.Filter != "" {
		filter = " AND (" + task.Filter + ")"
	}
	w.tasks[task.Name] = &workerTask{
		Task: task,
		existsSQL: "SELECT EXISTS (SELECT 1 FROM " + sqlbucket.QualifiedTable(task.Schema, task.Table) +
			" WHERE " + pgx.Identifier{task.IDColumn}.Sanitize() + " = $1" + filter + ")",
	}
	return nil
}

// Register adds the worker to workers under its kind.
func (w *Worker) Register(workers *river.Workers) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("error registering sync worker for kind %q: %v", w.kind, r)
		}
	}()
	river.AddWorkerArgs(workers, Args{kind: w.kind}, river.Worker[Args](w))
	return nil
}

// Timeout returns the task's sync timeout.
func (w *Worker) Timeout(job *river.Job[Args]) time.Duration {
	if t, ok := w.tasks[job.Args.Task]; ok {
		return t.Timeout
	}
	return 0
}

// Work checks that the account still exists and matches the filter, then
// calls the task's SyncFunc.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	task, ok := w.tasks[job.Args.Task]
	if !ok {
		return river.JobCancel(fmt.Errorf("no riverslot task %q is registered for sync kind %q in this process; register it with riverutil or delete the job", job.Args.Task, w.kind))
	}
	if job.Args.AccountID == uuid.Nil {
		return river.JobCancel(errors.New("sync job has no account_id"))
	}

	var exists bool
	if err := w.pool.QueryRow(ctx, task.existsSQL, job.Args.AccountID).Scan(&exists); err != nil {
		return fmt.Errorf("error checking account %s of task %q: %w", job.Args.AccountID, task.Name, err)
	}
	if !exists {
		w.logger.InfoContext(ctx, "riverslot: account gone or filtered out since fan-out; nothing to sync",
			slog.String("task", task.Name), slog.String("account_id", job.Args.AccountID.String()))
		return nil
	}

	return task.Sync(ctx, job.Args.AccountID, job)
}
