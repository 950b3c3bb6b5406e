package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/internal/pinning"
	"github.com/riverslot/riverslot/internal/taskspec"
)

// CensusKind is the River job kind of weight census jobs. Weighted tasks
// share it; the args carry the task name.
const CensusKind = "riverslot_census"

// censusPriority runs census jobs after the bootstrap and per-slot jobs of
// the control queue (priority 1): a census is due a cycle later, a fan-out
// within its lead.
const censusPriority = 4

// CensusArgs are the arguments of a census job: the weight census of a
// weighted task's plan taken for the pins of the cycle starting at
// CycleStart (pinning.Census). One exists per (task, plan, cycle start):
// unique by args while it is pending, running or completed.
type CensusArgs struct {
	Task       string           `json:"task"`
	Plan       taskspec.PlanKey `json:"plan"`
	CycleStart time.Time        `json:"cycle_start"`
}

// Kind returns CensusKind.
func (CensusArgs) Kind() string { return CensusKind }

// censusParams returns the insert params of the census job of owner's
// cycle starting at cycleStart, to run at once in the control queue.
func censusParams(owner *taskspec.Spec, cycleStart time.Time) river.InsertManyParams {
	return river.InsertManyParams{
		Args: CensusArgs{Task: owner.Name, Plan: owner.Key, CycleStart: cycleStart.UTC()},
		InsertOpts: &river.InsertOpts{
			Queue:      owner.ControlQueue,
			Priority:   censusPriority,
			UniqueOpts: river.UniqueOpts{ByArgs: true}, // pending to completed: a discarded census may be taken again
		},
	}
}

// CensusStallWait is how long a census job waits after stalls attempts in
// a row took no step: 2 s, 4 s, 8 s, ... up to 5 minutes.
func CensusStallWait(stalls int) time.Duration {
	return min(time.Second<<min(max(stalls, 1), 9), 5*time.Minute)
}

// CensusWorker works census jobs: it takes census steps (pinning.Step, each
// one bucket range in a short transaction of its own on the accounts'
// database) until about half its timeout is used, then snoozes to carry on
// in a fresh attempt. It never holds a transaction across steps, and a
// census interrupted by a crash resumes at its next bucket.
type CensusWorker struct {
	river.WorkerDefaults[CensusArgs]

	logger *slog.Logger
	pool   *pgxpool.Pool
	specs  map[string]*taskspec.Spec

	// stalls counts a census job's stalls on this node, for when the
	// census table cannot record them.
	stalls taskspec.Waits
}

// NewCensusWorker returns a census worker. riverslot builds it.
func NewCensusWorker(pool *pgxpool.Pool, logger *slog.Logger) *CensusWorker {
	return &CensusWorker{logger: logger, pool: pool, specs: make(map[string]*taskspec.Spec)}
}

// AddTask makes the worker serve the task of spec.
func (w *CensusWorker) AddTask(spec *taskspec.Spec) { w.specs[spec.Name] = spec }

// Register adds the worker to workers.
func (w *CensusWorker) Register(workers *river.Workers) error {
	return river.AddWorkerSafely(workers, river.Worker[CensusArgs](w))
}

// Timeout returns the census job's timeout: the task's BootstrapTimeout
// (twice PinsTimeout, 1 minute by default), within which Configure's
// RescueStuckJobsAfter already lies.
func (w *CensusWorker) Timeout(job *river.Job[CensusArgs]) time.Duration {
	if spec, ok := w.specs[job.Args.Task]; ok && spec.BootstrapTimeout > 0 {
		return spec.BootstrapTimeout
	}
	return time.Minute
}

// Work takes steps of the job's census until it is finished or half the
// job's timeout is used; then it snoozes (river.JobSnooze(0): available
// again at once, the attempt given back) and carries on in the next
// attempt.
func (w *CensusWorker) Work(ctx context.Context, job *river.Job[CensusArgs]) error {
	begun := time.Now()
	spec, ok := w.specs[job.Args.Task]
	if !ok {
		return river.JobCancel(fmt.Errorf("no weighted riverslot task %q is registered in this process; register it or delete the job", job.Args.Task))
	}
	spec, err := spec.ForPlan(job.Args.Plan, job.Args.CycleStart)
	if err != nil {
		return river.JobCancel(fmt.Errorf("error reading the plan of census job: %w", err))
	}
	cycleStart := job.Args.CycleStart.UTC()
	// A bootstrap uses a census started within the two cycles before its
	// cycle: one for a cycle that ended long ago is of no use.
	if late := time.Since(cycleStart); late > 2*spec.Plan.Cycle+time.Hour {
		return river.JobCancel(fmt.Errorf("the census of task %q for cycle %s is %s past its cycle start: no bootstrap would use it", spec.Name,
			cycleStart.Format(time.RFC3339), late.Round(time.Second)))
	}
	// Steps start until half the timeout is used; each statement ends by
	// three quarters of it (a step cut short is rolled back and the job
	// snoozes), before River cancels the attempt.
	timeout := w.Timeout(job)
	until, deadline := begun.Add(timeout/2), begun.Add(timeout*3/4)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c, steps, err := pinning.Run(ctx, spec.AccountsDB(w.pool), spec, cycleStart, until, deadline)
	if err != nil {
		return fmt.Errorf("task %q: %w", spec.Name, err)
	}
	db := spec.AccountsDB(w.pool)
	if steps > 0 {
		if _, err := db.Exec(ctx, spec.Pins.CensusProgressed, spec.Name, spec.PlanID, cycleStart); err != nil {
			// Only Status's stall report depends on it (the columns come
			// with CreateIndexes after an upgrade): the census goes on.
			w.logger.WarnContext(ctx, "riverslot: could not clear the census's stall record (run Scheduler.CreateIndexes after upgrading)",
				slog.String("task", spec.Name), slog.String("error", err.Error()))
		}
	}
	if !c.Finished {
		if steps > 0 {
			w.logger.DebugContext(ctx, "riverslot: weight census carries on in a fresh attempt",
				slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.Int("steps", steps), slog.Int("next_bucket", c.NextBucket))
			return river.JobSnooze(0)
		}
		// No step in this attempt (the accounts table locked, each step
		// cut by its timeout): back off, say so, and record it for Status.
		stalls := w.stalls.Add(job.ID) // when the stall cannot be recorded
		_, err := db.Exec(ctx, spec.Pins.CensusStart, spec.Name, spec.PlanID, cycleStart, spec.Plan.Slots)
		if err == nil {
			err = db.QueryRow(ctx, spec.Pins.CensusStalled, spec.Name, spec.PlanID, cycleStart).Scan(&stalls)
		}
		if err != nil {
			w.logger.WarnContext(ctx, "riverslot: could not record the census's stall (run Scheduler.CreateIndexes after upgrading)",
				slog.String("task", spec.Name), slog.String("error", err.Error()))
		}
		wait := CensusStallWait(stalls)
		w.logger.WarnContext(ctx, "riverslot: weight census took no step in this attempt (each step ran out of time: a lock on the accounts table, or a slow database); it backs off and tries again",
			slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.Int("stalls_in_a_row", stalls),
			slog.Int("next_bucket", c.NextBucket), slog.Duration("retry_in", wait))
		return river.JobSnooze(wait)
	}
	w.logger.InfoContext(ctx, "riverslot: weight census finished; the cycle's bootstrap computes its pins from it",
		slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.Time("started_at", c.StartedAt),
		slog.Int("steps", c.Steps), slog.Int64("accounts", c.Accounts), slog.Int("candidates", len(c.Candidates)))
	return nil
}
