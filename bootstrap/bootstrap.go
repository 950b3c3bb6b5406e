package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/slotplan"
)

// Kind is the River job kind of bootstrap jobs. Tasks share it; the args carry
// the task name.
const Kind = "riverslot_bootstrap"

// Args are the arguments of a bootstrap job.
type Args struct {
	Task       string    `json:"task"`
	CycleStart time.Time `json:"cycle_start"`
}

// Kind returns Kind.
func (Args) Kind() string { return Kind }

// Task is what the bootstrap worker needs to know about one task.
type Task struct {
	Name string
	Plan slotplan.Plan

	// Queue and Priority are used for the bootstrap job itself and for the
	// per-slot jobs it inserts.
	Queue    string
	Priority int
}

// InsertOpts returns the options a bootstrap job for cycleStart is inserted
// with: unique by args, scheduled at cycleStart.
func (t Task) InsertOpts(cycleStart time.Time) *river.InsertOpts {
	return &river.InsertOpts{
		Queue:       t.Queue,
		Priority:    t.Priority,
		ScheduledAt: cycleStart,
		UniqueOpts:  river.UniqueOpts{ByArgs: true},
	}
}

// NewArgs returns the bootstrap args for task and cycleStart (normalized to
// UTC so that the unique key does not depend on the caller's location).
func NewArgs(task string, cycleStart time.Time) Args {
	return Args{Task: task, CycleStart: cycleStart.UTC()}
}

// PerSlotParams returns the insert params of every per-slot job of the cycle.
func (t Task) PerSlotParams(cycleStart time.Time) []river.InsertManyParams {
	cycleStart = cycleStart.UTC()
	params := make([]river.InsertManyParams, t.Plan.Slots)
	for slot := range t.Plan.Slots {
		params[slot] = river.InsertManyParams{
			Args: perslot.Args{Task: t.Name, CycleStart: cycleStart, Slot: slot},
			InsertOpts: &river.InsertOpts{
				Queue:       t.Queue,
				Priority:    t.Priority,
				ScheduledAt: t.Plan.SlotStart(cycleStart, slot),
				UniqueOpts:  river.UniqueOpts{ByArgs: true},
			},
		}
	}
	return params
}

// Worker works bootstrap jobs.
type Worker struct {
	river.WorkerDefaults[Args]

	logger *slog.Logger
	pool   *pgxpool.Pool
	tasks  map[string]Task
}

// NewWorker returns a bootstrap worker.
func NewWorker(pool *pgxpool.Pool, logger *slog.Logger) *Worker {
	if logger == nil {
		logger = slog.Default()
	}
	return &Worker{logger: logger, pool: pool, tasks: make(map[string]Task)}
}

// AddTask makes the worker serve task.
func (w *Worker) AddTask(task Task) error {
	if _, ok := w.tasks[task.Name]; ok {
		return fmt.Errorf("bootstrap worker already serves task %q", task.Name)
	}
	w.tasks[task.Name] = task
	return nil
}

// Register adds the worker to workers.
func (w *Worker) Register(workers *river.Workers) error {
	return river.AddWorkerSafely(workers, river.Worker[Args](w))
}

// Work inserts the cycle's per-slot jobs and completes the bootstrap job in
// one transaction.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	task, ok := w.tasks[job.Args.Task]
	if !ok {
		return river.JobCancel(fmt.Errorf("no riverslot task %q is registered in this process; register it with riverutil or delete the job", job.Args.Task))
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}

	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit

	results, err := client.InsertManyTx(ctx, tx, task.PerSlotParams(job.Args.CycleStart))
	if err != nil {
		return fmt.Errorf("error inserting %d per-slot jobs of task %q: %w", task.Plan.Slots, task.Name, err)
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("error completing bootstrap job: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing per-slot jobs: %w", err)
	}

	inserted := 0
	for _, r := range results {
		if !r.UniqueSkippedAsDuplicate {
			inserted++
		}
	}
	w.logger.InfoContext(ctx, "riverslot: cycle bootstrapped",
		slog.String("task", task.Name), slog.Time("cycle_start", job.Args.CycleStart),
		slog.Int("slots", task.Plan.Slots), slog.Duration("slot_duration", task.Plan.SlotDuration),
		slog.Int("per_slot_inserted", inserted), slog.Int("per_slot_already_present", len(results)-inserted))
	return nil
}
