package riverutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverslot/riverslot/bootstrap"
	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/syncjob"
)

// TriggerTolerance is how far ahead of "now" the periodic trigger looks for
// the cycle start: River may run a periodic job up to 100ms early, and a
// trigger that fires at 23:59:59.9 must still bootstrap the cycle of
// 00:00:00.
const TriggerTolerance = time.Second

// Config configures a Plugin. A nil Config is invalid: at least one task is
// required.
type Config struct {
	// Tasks to schedule. Required; names must be unique.
	Tasks []Task

	// Logger receives the plugin's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// Plugin holds validated tasks and their workers. Build it with New.
type Plugin struct {
	bootstrap *bootstrap.Worker
	logger    *slog.Logger
	perSlot   *perslot.Worker
	pool      *pgxpool.Pool
	sync      map[string]*syncjob.Worker
	tasks     []*task
	byName    map[string]*task
}

type task struct {
	Task

	plan      slotplan.Plan
	schedule  slotplan.Schedule
	bootstrap bootstrap.Task
}

// New validates config and builds the workers. pool is used by the workers
// to select accounts and to enqueue in transactions; it must reach the same
// database as the River client.
func New(pool *pgxpool.Pool, config *Config) (*Plugin, error) {
	if pool == nil {
		return nil, errors.New("riverslot: pool must not be nil")
	}
	if config == nil || len(config.Tasks) == 0 {
		return nil, errors.New("riverslot: Config.Tasks must contain at least one task")
	}
	logger := config.Logger
	if logger == nil {
		logger = slog.Default()
	}

	p := &Plugin{
		bootstrap: bootstrap.NewWorker(pool, logger),
		logger:    logger,
		perSlot:   perslot.NewWorker(pool, logger),
		pool:      pool,
		sync:      make(map[string]*syncjob.Worker),
		byName:    make(map[string]*task),
	}

	var errs []error
	for i, raw := range config.Tasks {
		if raw.Name != "" {
			if _, dup := p.byName[raw.Name]; dup {
				errs = append(errs, fmt.Errorf("Tasks[%d]: Name %q is used by another task; task names must be unique", i, raw.Name))
				continue
			}
		}
		plan, err := slotplan.New(raw.Cycle)
		if err != nil {
			errs = append(errs, fmt.Errorf("invalid riverslot task %q: %w", raw.Name, err))
			continue
		}
		t := raw.withDefaults(plan)
		if err := t.validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		schedule, _ := slotplan.NewSchedule(t.Cycle, t.TriggerOffset, t.Location) // validated above
		tk := &task{
			Task:     t,
			plan:     plan,
			schedule: schedule,
			bootstrap: bootstrap.Task{
				Name: t.Name, Plan: plan, Queue: t.ControlQueue, Priority: PriorityControlDefault,
			},
		}
		if err := p.addTask(tk); err != nil {
			errs = append(errs, err)
			continue
		}
		p.tasks = append(p.tasks, tk)
		p.byName[t.Name] = tk
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Plugin) addTask(t *task) error {
	if err := p.bootstrap.AddTask(t.bootstrap); err != nil {
		return err
	}
	if err := p.perSlot.AddTask(perslot.Task{
		Name: t.Name, Plan: t.plan, Seed: t.Seed,
		Schema: t.Schema, Table: t.Table, IDColumn: t.IDColumn, Filter: t.Filter,
		BatchSize: t.BatchSize, LatePolicy: t.LatePolicy, LateGrace: t.LateGrace, Timeout: t.PerSlotTimeout,
		SyncKind: t.SyncKind,
		SyncOpts: river.InsertOpts{Queue: t.Queue, Priority: t.Priority, MaxAttempts: t.MaxAttempts},
	}); err != nil {
		return err
	}
	w, ok := p.sync[t.SyncKind]
	if !ok {
		w = syncjob.NewWorker(p.pool, t.SyncKind, p.logger)
		p.sync[t.SyncKind] = w
	}
	return w.AddTask(syncjob.Task{
		Name: t.Name, Schema: t.Schema, Table: t.Table, IDColumn: t.IDColumn, Filter: t.Filter,
		Timeout: t.SyncTimeout, Sync: t.Sync,
	})
}

// AddWorkers registers the bootstrap, per-slot and sync workers on workers.
// It errors if a kind is already registered.
func (p *Plugin) AddWorkers(workers *river.Workers) error {
	if err := p.bootstrap.Register(workers); err != nil {
		return err
	}
	if err := p.perSlot.Register(workers); err != nil {
		return err
	}
	for _, w := range p.sync {
		if err := w.Register(workers); err != nil {
			return err
		}
	}
	return nil
}

// PeriodicJobs returns one periodic trigger per task for river.Config's
// PeriodicJobs. Each fires at every cycle start and enqueues the bootstrap
// job of the cycle that starts at that nominal time; RunOnStart enqueues the
// current cycle when a client becomes leader, and uniqueness by (task, cycle
// start) means neither ever doubles a cycle.
func (p *Plugin) PeriodicJobs() []*river.PeriodicJob {
	jobs := make([]*river.PeriodicJob, 0, len(p.tasks))
	for _, t := range p.tasks {
		jobs = append(jobs, river.NewPeriodicJob(t.schedule, func() (river.JobArgs, *river.InsertOpts) {
			start := t.schedule.Start(time.Now().Add(TriggerTolerance))
			return bootstrap.NewArgs(t.Name, start), t.bootstrap.InsertOpts(start)
		}, &river.PeriodicJobOpts{ID: "riverslot_" + t.Name, RunOnStart: true}))
	}
	return jobs
}

// EnqueueCycle inserts the bootstrap job of task for the cycle starting at
// cycleStart (which must be a cycle start of the task's schedule), to run
// now: it enqueues the cycle's per-slot jobs at their slot times, so a cycle
// can be prepared ahead of time or re-run after it began. It is
// idempotent: a second call for the same cycle returns the existing job with
// UniqueSkippedAsDuplicate set.
func (p *Plugin) EnqueueCycle(ctx context.Context, client *river.Client[pgx.Tx], taskName string, cycleStart time.Time) (*rivertype.JobInsertResult, error) {
	args, opts, err := p.bootstrapParams(taskName, cycleStart)
	if err != nil {
		return nil, err
	}
	return client.Insert(ctx, args, opts)
}

// EnqueueCycleTx is EnqueueCycle in the caller's transaction.
func (p *Plugin) EnqueueCycleTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, taskName string, cycleStart time.Time) (*rivertype.JobInsertResult, error) {
	args, opts, err := p.bootstrapParams(taskName, cycleStart)
	if err != nil {
		return nil, err
	}
	return client.InsertTx(ctx, tx, args, opts)
}

func (p *Plugin) bootstrapParams(taskName string, cycleStart time.Time) (river.JobArgs, *river.InsertOpts, error) {
	t, ok := p.byName[taskName]
	if !ok {
		return nil, nil, fmt.Errorf("riverslot: no task named %q", taskName)
	}
	if !t.schedule.Start(cycleStart).Equal(cycleStart) {
		return nil, nil, fmt.Errorf("riverslot: cycleStart %s is not a cycle start of task %q (cycle %s); the cycle containing it starts at %s",
			cycleStart.Format(time.RFC3339Nano), taskName, t.Cycle, t.schedule.Start(cycleStart).Format(time.RFC3339Nano))
	}
	// The bootstrap job itself runs at once; the per-slot jobs it inserts
	// carry the absolute slot times. Waiting for River's scheduler to
	// promote the bootstrap would only delay slot 0 of a near cycle.
	opts := t.bootstrap.InsertOpts(cycleStart)
	opts.ScheduledAt = time.Time{}
	return bootstrap.NewArgs(t.Name, cycleStart), opts, nil
}

// RescueMargin is added to the longest job timeout by RescueStuckJobsAfter.
const RescueMargin = time.Minute

// RescueStuckJobsAfter is the value riverslot recommends for
// river.Config.RescueStuckJobsAfter: the longest per-slot or sync timeout of
// any task plus RescueMargin (2 minutes with the defaults). River leaves a job
// whose process died in the running state until its rescuer (run every 30 s
// by the leader) finds it older than RescueStuckJobsAfter; River's own
// default is 1 hour, longer than a 24h cycle's 11m15s slot. With this value
// an orphaned per-slot job is retried, from its last committed batch, about
// RescueStuckJobsAfter + 30 s + a few seconds of retry backoff after it
// started. Set river.Config.JobTimeout no higher than this value.
func (p *Plugin) RescueStuckJobsAfter() time.Duration {
	var longest time.Duration
	for _, t := range p.tasks {
		longest = max(longest, t.PerSlotTimeout, t.SyncTimeout)
	}
	return longest + RescueMargin
}

// Plan returns the slot plan of the named task.
func (p *Plugin) Plan(taskName string) (slotplan.Plan, bool) {
	t, ok := p.byName[taskName]
	if !ok {
		return slotplan.Plan{}, false
	}
	return t.plan, true
}

// Schedule returns the cycle schedule of the named task.
func (p *Plugin) Schedule(taskName string) (slotplan.Schedule, bool) {
	t, ok := p.byName[taskName]
	if !ok {
		return slotplan.Schedule{}, false
	}
	return t.schedule, true
}

// Seed returns the effective offset seed of the named task.
func (p *Plugin) Seed(taskName string) (uint64, bool) {
	t, ok := p.byName[taskName]
	if !ok {
		return 0, false
	}
	return t.Seed, true
}
