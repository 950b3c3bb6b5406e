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

	"github.com/riverslot/riverslot/internal/pinning"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/perslot"
)

// Kind is the River job kind of bootstrap jobs. Tasks share it; the args carry
// the task name.
const Kind = "riverslot_bootstrap"

// Args are the arguments of a bootstrap job. One exists per (task, cycle
// start, plan): it is unique by its args in every state.
type Args struct {
	Task       string    `json:"task"`
	CycleStart time.Time `json:"cycle_start"`
	// Plan identifies the slot plan the cycle is made for (cycle, slots and
	// seed). A bootstrap made under another plan is cancelled, not run.
	Plan string `json:"plan"`
}

// Kind returns Kind.
func (Args) Kind() string { return Kind }

// NewArgs returns the bootstrap args of spec's cycle starting at cycleStart
// (normalized to UTC so that the unique key does not depend on the caller's
// location).
func NewArgs(spec *taskspec.Spec, cycleStart time.Time) Args {
	return Args{Task: spec.Name, CycleStart: cycleStart.UTC(), Plan: spec.PlanID}
}

// perSlotParams returns the insert params of every per-slot job of the cycle:
// each runs Lead before its slot and is unique by args in every state.
func perSlotParams(spec *taskspec.Spec, cycleStart time.Time) []river.InsertManyParams {
	cycleStart = cycleStart.UTC()
	params := make([]river.InsertManyParams, spec.Plan.Slots)
	for slot := range spec.Plan.Slots {
		params[slot] = river.InsertManyParams{
			Args: perslot.NewArgs(spec, cycleStart, slot),
			InsertOpts: &river.InsertOpts{
				Queue:       spec.ControlQueue,
				Priority:    spec.ControlPriority,
				ScheduledAt: spec.PerSlotStart(cycleStart, slot),
				UniqueOpts:  taskspec.UniqueEveryState(),
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
	specs  map[string]*taskspec.Spec
}

// NewWorker returns a bootstrap worker. riverutil builds it.
func NewWorker(pool *pgxpool.Pool, logger *slog.Logger) *Worker {
	return &Worker{logger: logger, pool: pool, specs: make(map[string]*taskspec.Spec)}
}

// AddTask makes the worker serve the task of spec.
func (w *Worker) AddTask(spec *taskspec.Spec) { w.specs[spec.Name] = spec }

// Register adds the worker to workers.
func (w *Worker) Register(workers *river.Workers) error {
	return river.AddWorkerSafely(workers, river.Worker[Args](w))
}

// Work inserts the cycle's per-slot jobs and completes the bootstrap job in
// one transaction; for a weighted task it first pins the cycle's jumbo
// accounts in the same transaction (see pinning.Place).
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	spec, ok := w.specs[job.Args.Task]
	if !ok {
		return river.JobCancel(fmt.Errorf("no riverslot task %q is registered in this process; register it or delete the job", job.Args.Task))
	}
	spec, err := spec.ForPlan(job.Args.Plan, job.Args.CycleStart)
	if err != nil {
		return river.JobCancel(fmt.Errorf("error reading the plan of bootstrap job: %w", err))
	}
	if spec != w.specs[job.Args.Task] {
		w.logger.WarnContext(ctx, "riverslot: bootstrap job was made for another plan than this node's; running it under its own plan (Cycle or Seed changed, or nodes of a rolling deploy disagree)",
			slog.String("task", spec.Name), slog.Time("cycle_start", job.Args.CycleStart),
			slog.String("job_plan", job.Args.Plan), slog.String("node_plan", w.specs[job.Args.Task].PlanID), slog.Int64("job_id", job.ID))
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}

	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("error starting bootstrap transaction: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit

	// The cycle's placement is decided here, once, and recorded in every
	// per-slot job (perslot.NewArgs): its own pins for a weighted task, the
	// pins of the task it is OppositeOf when that one is weighted (computed
	// here if its own bootstrap has not yet: Place runs once per cycle).
	var (
		pins  pinning.Outcome
		owner = spec
	)
	if spec.PinsFrom != nil {
		owner = spec.PinsFrom
	}
	if spec.PinsRef() != nil {
		if pins, err = pinning.Place(ctx, tx, owner, job.Args.CycleStart); err != nil {
			return fmt.Errorf("error placing the jumbo accounts of task %q: %w", owner.Name, err)
		}
		if _, err := pinning.Prune(ctx, tx, owner, client.Schema(), job.Args.CycleStart); err != nil {
			return fmt.Errorf("task %q: %w", owner.Name, err)
		}
	}
	results, err := client.InsertManyTx(ctx, tx, perSlotParams(spec, job.Args.CycleStart))
	if err != nil {
		return fmt.Errorf("error inserting %d per-slot jobs of task %q: %w", spec.Plan.Slots, spec.Name, err)
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("error completing bootstrap job: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing per-slot jobs: %w", err)
	}

	if spec.PinsRef() != nil {
		pinning.Log(ctx, w.logger, owner, job.Args.CycleStart, pins)
	}
	inserted := 0
	for _, r := range results {
		if !r.UniqueSkippedAsDuplicate {
			inserted++
		}
	}
	w.logger.InfoContext(ctx, "riverslot: cycle bootstrapped",
		slog.String("task", spec.Name), slog.Time("cycle_start", job.Args.CycleStart),
		slog.Int("slots", spec.Plan.Slots), slog.Duration("slot_duration", spec.Plan.SlotDuration),
		slog.Int("per_slot_inserted", inserted), slog.Int("per_slot_already_present", len(results)-inserted))
	return nil
}
