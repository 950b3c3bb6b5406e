package riverslot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/metric"

	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/metrics"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// triggerTolerance is how far ahead of its nominal time River's periodic
// enqueuer may run a trigger (100 ms), rounded up: a trigger that fires at
// 23:59:49.9 must still bootstrap the cycle it was scheduled for.
const triggerTolerance = time.Second

// Config configures a Scheduler. A nil Config is invalid: at least one task
// is required.
type Config struct {
	// Tasks to schedule. Required; names must be unique.
	Tasks []Task

	// AccountsPool reaches the database holding the accounts tables (the
	// app's database or a read replica) when that is not River's; a Task's
	// own AccountsPool overrides it. See Task.AccountsPool. Defaults to nil:
	// the accounts are in River's database, read through the pool given to
	// New.
	AccountsPool *pgxpool.Pool

	// Logger receives the scheduler's logs, Check's warnings included.
	// Defaults to the Logger of the river.Config given to Configure, else
	// slog.Default(); set it to see Check's warnings, which come before
	// Configure, in the app's logger.
	Logger *slog.Logger

	// MeterProvider receives riverslot's OpenTelemetry metrics (fan-out
	// duration and accounts per slot, sync jobs enqueued, late accounts
	// spread and skipped, sync start lateness, per-slot lag and retries;
	// docs/operations.md lists them). Defaults to nil: no metrics, and no
	// use of the global provider.
	MeterProvider metric.MeterProvider

	// Shard names the shard this scheduler's River database is, for tasks
	// spread over several databases (docs/shards.md): a sharded task's
	// cycles on this database serve the slots its shard map (stored in
	// the database, SetShardMap) gives this shard. Every scheduler of a
	// database names the same shard; a node serving several shards builds
	// one Scheduler and one River client per database. A task with no
	// shard map in this database is not sharded (every slot); a task whose
	// maps here are all in force only from a later cycle refuses that
	// cycle's bootstrap, logged at error. Defaults to "": a task with a
	// shard map in this database then fails its bootstrap, saying so.
	Shard string
}

// Scheduler holds validated tasks and the River workers that run them. Build
// it with New, wire it into a River client with Configure.
type Scheduler struct {
	shard       string // Config.Shard
	configured  bool
	riverSchema string // river.Config.Schema, set by Configure
	// completedRetention is river.Config.CompletedJobRetentionPeriod as
	// Configure found it (0: River's default).
	completedRetention time.Duration
	// queueWorkers is MaxWorkers of each queue of river.Config.Queues as
	// Configure found them (nil before Configure; a queue missing: this
	// client does not work it).
	queueWorkers map[string]int
	logger       *slog.Logger // nil until Configure when Config.Logger is nil
	pool         *pgxpool.Pool
	specs        []*taskspec.Spec
	syncs        []SyncFunc // by spec index
	byName       map[string]*taskspec.Spec
	// punctual names the tasks whose sync jobs are inserted available
	// (Task.Punctual).
	punctual map[string]bool
	// onSkip is each task's Task.OnSkip.
	onSkip map[string]SkipFunc
	// syncWorkers are the sync workers Configure registered: each counts
	// its jobs' outcomes into the ledger (FlushOutcomes).
	syncWorkers []*syncjob.Worker

	expectedMu sync.Mutex
	expected   map[string]expectedCount // Status's accounts per slot, by task
}

// New validates config and builds the workers, reporting every problem of
// every task at once. pool must reach the same database as the River
// client: the workers enqueue and checkpoint in transactions on it, and
// read the accounts through it unless Config.AccountsPool or a
// Task.AccountsPool names another database.
func New(pool *pgxpool.Pool, config *Config) (*Scheduler, error) {
	if pool == nil {
		return nil, errors.New("pool must not be nil")
	}
	s, err := newScheduler(config)
	if err != nil {
		return nil, err
	}
	s.pool = pool
	for _, spec := range s.specs {
		if spec.AccountsPool == pool {
			spec.AccountsPool = nil // River's own database
		}
	}
	return s, nil
}

// newScheduler is New without the pool: it validates config into one spec
// per task.
func newScheduler(config *Config) (*Scheduler, error) {
	if config == nil || len(config.Tasks) == 0 {
		return nil, errors.New("Config.Tasks must contain at least one task")
	}
	if config.Shard != "" && !slotplan.ValidShardName(config.Shard) {
		return nil, fmt.Errorf("Config.Shard must be 1-64 letters, digits, '_', '-' or '.', got %q", config.Shard)
	}
	s := &Scheduler{
		shard:    config.Shard,
		logger:   config.Logger,
		byName:   make(map[string]*taskspec.Spec),
		punctual: make(map[string]bool),
		onSkip:   make(map[string]SkipFunc),
	}

	configs := make([]taskspec.Config, len(config.Tasks))
	syncs := make(map[string]SyncFunc, len(config.Tasks))
	for i, t := range config.Tasks {
		if t.AccountsPool == nil {
			t.AccountsPool = config.AccountsPool
		}
		configs[i] = t.config()
		if t.Punctual {
			s.punctual[t.Name] = true
		}
		if _, dup := syncs[t.Name]; !dup {
			syncs[t.Name] = t.Sync
			s.onSkip[t.Name] = t.OnSkip
		}
	}
	specs, err := taskspec.Build(configs)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	s.specs = specs
	for _, spec := range specs {
		s.syncs = append(s.syncs, syncs[spec.Name])
		s.byName[spec.Name] = spec
	}
	instruments, err := metrics.New(config.MeterProvider)
	if err != nil {
		errs = append(errs, fmt.Errorf("MeterProvider: error creating riverslot's instruments: %w", err))
	}
	instruments.SetShard(config.Shard)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if config.MeterProvider != nil {
		for _, spec := range s.specs {
			spec.Metrics = instruments
		}
	}
	return s, nil
}

// Configure wires the scheduler into config, the one way to do it: it
// registers the bootstrap, per-slot, sync and weight census workers on config.Workers
// (creating it when nil), appends one periodic trigger per task to
// config.PeriodicJobs, and sets the River setting riverslot's guarantees
// rest on, refusing a value that would break them:
//
//   - RescueStuckJobsAfter: how long a job may run before River's rescuer
//     assumes its process died and retries it. It applies to every job of
//     the client, the app's own included. Defaults here to the longest
//     bootstrap, per-slot or sync timeout plus one minute (2 minutes with the defaults),
//     so a per-slot job orphaned by a dead process resumes within its slot;
//     River's own default is 1 hour. A value below the longest per-slot or
//     sync timeout is
//     refused: running jobs would be rescued and run twice. If the app's own
//     jobs run longer than this, give riverslot its own client (and queues)
//     or set RescueStuckJobsAfter above their longest run and accept a slower
//     recovery of an orphaned fan-out.
//
// River's retention periods (CompletedJobRetentionPeriod and the others)
// are left as they are, River's defaults or the app's: a cycle's
// uniqueness is kept in riverslot's ledger (riverslot.Migrate creates it),
// not in River's finished jobs, so River may delete them as early as the
// app likes, a minute after they finish for a 24 h cycle. river_job then
// holds about accounts x (Lead + slot + retention) / cycle rows
// (docs/scale.md); Check warns when that exceeds RowBudgetWarn.
func (s *Scheduler) Configure(config *river.Config) error {
	if config == nil {
		return errors.New("config must not be nil")
	}
	rescue := s.rescueStuckJobsAfter()
	if config.JobTimeout > 0 {
		// River requires RescueStuckJobsAfter >= JobTimeout, the timeout of
		// the app's jobs without their own.
		rescue = max(rescue, config.JobTimeout+rescueMargin)
	}
	switch {
	case config.RescueStuckJobsAfter == 0:
		config.RescueStuckJobsAfter = rescue
	case config.RescueStuckJobsAfter < s.longestNonIdempotentTimeout():
		return fmt.Errorf("RescueStuckJobsAfter %s is shorter than the longest riverslot job timeout (%s); running jobs would be rescued and run twice: leave it 0 for %s or raise it",
			config.RescueStuckJobsAfter, s.longestNonIdempotentTimeout(), rescue)
	}
	s.completedRetention = config.CompletedJobRetentionPeriod
	s.queueWorkers = make(map[string]int, len(config.Queues))
	for name, q := range config.Queues {
		s.queueWorkers[name] = q.MaxWorkers
	}
	if s.logger == nil {
		s.logger = cmp.Or(config.Logger, slog.Default())
	}
	s.configured, s.riverSchema = true, config.Schema
	bootstrapWorker := bootstrap.NewWorker(s.pool, s.logger)
	bootstrapWorker.SetShard(s.shard)
	perSlotWorker := perslot.NewWorker(s.pool, s.logger)
	syncWorker := syncjob.NewWorker(s.pool, s.logger)
	s.syncWorkers = append(s.syncWorkers, syncWorker)
	censusWorker := bootstrap.NewCensusWorker(s.pool, s.logger)
	for i, spec := range s.specs {
		bootstrapWorker.AddTask(spec)
		perSlotWorker.AddTask(spec)
		syncWorker.AddTask(spec, s.syncs[i])
		if f := s.onSkip[spec.Name]; f != nil {
			syncWorker.OnSkip(spec.Name, f)
		}
		if spec.Weighted() {
			censusWorker.AddTask(spec)
		}
	}
	if config.Workers == nil {
		config.Workers = river.NewWorkers()
	}
	if err := bootstrapWorker.Register(config.Workers); err != nil {
		return fmt.Errorf("error registering bootstrap worker: %w", err)
	}
	if err := perSlotWorker.Register(config.Workers); err != nil {
		return fmt.Errorf("error registering per-slot worker: %w", err)
	}
	if err := syncWorker.Register(config.Workers); err != nil {
		return fmt.Errorf("error registering sync worker: %w", err)
	}
	if err := censusWorker.Register(config.Workers); err != nil {
		return fmt.Errorf("error registering weight census worker: %w", err)
	}
	config.PeriodicJobs = append(config.PeriodicJobs, s.periodicJobs()...)
	if len(s.punctual) > 0 {
		config.Hooks = append(config.Hooks, river.HookInsertBeginFunc(s.insertPunctual))
	}
	// What a task's first cycle does (Task.FirstCycle) is said by the
	// bootstrap that finds it begun with no earlier cycle in the ledger, at
	// warn, when it applies: said here, at every start, it was said to
	// fleets whose ledger has years of cycles.
	return nil
}

func (s *Scheduler) log() *slog.Logger { return cmp.Or(s.logger, slog.Default()) }

// rescueMargin is added to the longest job timeout for RescueStuckJobsAfter.
const rescueMargin = time.Minute

// rescueStuckJobsAfter is the longest bootstrap, per-slot or sync timeout
// plus rescueMargin.
func (s *Scheduler) rescueStuckJobsAfter() time.Duration {
	var longest time.Duration
	for _, spec := range s.specs {
		longest = max(longest, spec.PerSlotTimeout, spec.SyncTimeout, spec.BootstrapTimeout)
	}
	return longest + rescueMargin
}

// longestNonIdempotentTimeout is the longest per-slot or sync timeout: a
// shorter RescueStuckJobsAfter is refused. A weighted bootstrap's longer
// timeout is not: a rescued bootstrap is all one transaction behind the
// ledger's and the pins' claims, so its second run waits for the first
// and adds nothing when the first commits (the first, no longer running
// for River, rolls back otherwise).
func (s *Scheduler) longestNonIdempotentTimeout() time.Duration {
	var longest time.Duration
	for _, spec := range s.specs {
		longest = max(longest, spec.PerSlotTimeout, spec.SyncTimeout)
	}
	return longest
}

// triggerSchedule fires TriggerLead before every cycle start.
type triggerSchedule struct {
	schedule slotplan.Schedule
	lead     time.Duration
}

func (t triggerSchedule) Next(now time.Time) time.Time {
	return t.schedule.Next(now.Add(t.lead)).Add(-t.lead)
}

// periodicJobs returns one periodic trigger per task. Each fires TriggerLead
// before every cycle start and enqueues the bootstrap job of that cycle, to
// run at once; RunOnStart enqueues the current cycle when a client becomes
// leader, and uniqueness by (task, cycle start, plan) means neither ever
// doubles a cycle.
func (s *Scheduler) periodicJobs() []*river.PeriodicJob {
	jobs := make([]*river.PeriodicJob, 0, len(s.specs))
	for _, spec := range s.specs {
		jobs = append(jobs, river.NewPeriodicJob(triggerSchedule{spec.Schedule, spec.TriggerLead}, func() (river.JobArgs, *river.InsertOpts) {
			now := time.Now()
			start := spec.Schedule.Start(now.Add(spec.TriggerLead + triggerTolerance))
			s.log().Debug("riverslot: cycle trigger fired", slog.String("task", spec.Name), slog.Time("cycle_start", start))
			opts := spec.BootstrapOpts()
			opts.ScheduledAt = now // available at once, never waits for River's scheduler
			return bootstrap.NewArgs(spec, start), opts
		}, &river.PeriodicJobOpts{ID: "riverslot_" + spec.Name, RunOnStart: true}))
	}
	return jobs
}

// EnqueueCycle inserts the bootstrap job of task for the cycle starting at
// cycleStart (which must be a cycle start of the task's schedule), to run
// now: it enqueues the cycle's per-slot jobs at their slot times, so a cycle
// can be prepared ahead of time or re-run after it began. It is idempotent:
// a second call for the same cycle and plan returns the existing job with
// UniqueSkippedAsDuplicate set while River keeps it, whatever its state;
// once River has deleted it, the new bootstrap job finds the cycle in
// riverslot's ledger and completes without inserting anything. A cycle
// that started more than its ledger horizon ago (4 cycles + 1 h, less a
// cycle) is refused: its ledger rows may be pruned.
func (s *Scheduler) EnqueueCycle(ctx context.Context, client *river.Client[pgx.Tx], taskName string, cycleStart time.Time) (*rivertype.JobInsertResult, error) {
	args, opts, err := s.bootstrapParams(taskName, cycleStart)
	if err != nil {
		return nil, err
	}
	return client.Insert(ctx, args, opts)
}

// EnqueueCycleTx is EnqueueCycle in the caller's transaction.
func (s *Scheduler) EnqueueCycleTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, taskName string, cycleStart time.Time) (*rivertype.JobInsertResult, error) {
	args, opts, err := s.bootstrapParams(taskName, cycleStart)
	if err != nil {
		return nil, err
	}
	return client.InsertTx(ctx, tx, args, opts)
}

func (s *Scheduler) bootstrapParams(taskName string, cycleStart time.Time) (river.JobArgs, *river.InsertOpts, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, nil, err
	}
	if start := spec.Schedule.Start(cycleStart); !start.Equal(cycleStart) {
		return nil, nil, fmt.Errorf("cycleStart %s is not a cycle start of task %q (cycle %s); the cycle containing it starts at %s",
			cycleStart.Format(time.RFC3339Nano), taskName, spec.CycleName(), start.Format(time.RFC3339Nano))
	}
	if oldest := ledger.Oldest(spec.Plan.Cycle); time.Since(cycleStart) > oldest {
		return nil, nil, fmt.Errorf("cycleStart %s of task %q started more than %s ago (the ledger's horizon for a cycle of %s, 4 cycles + 1 h, less a cycle): too old to re-run; pass a later cycle start",
			cycleStart.Format(time.RFC3339Nano), taskName, oldest, spec.CycleName())
	}
	return bootstrap.NewArgs(spec, cycleStart), spec.BootstrapOpts(), nil
}

func (s *Scheduler) spec(taskName string) (*taskspec.Spec, error) {
	spec, ok := s.byName[taskName]
	if !ok {
		return nil, fmt.Errorf("no task named %q; the scheduler has %s", taskName, s.taskNames())
	}
	return spec, nil
}

func (s *Scheduler) taskNames() string { return taskspec.Names(s.specs) }

// TaskInfo describes one validated task, defaults applied.
type TaskInfo struct {
	// Name is Task.Name.
	Name string
	// Plan is the task's slot layout; for a calendar-month task, the
	// longest month's shape (31 days), and Month lays out each month.
	Plan slotplan.Plan
	// Month is the layout of a calendar-month task (Task.Monthly), nil
	// otherwise.
	Month *slotplan.Monthly
	// Schedule says where its cycles start.
	Schedule slotplan.Schedule
	// Seed is the effective offset seed.
	Seed uint64
	// Lead is how long before its slot each per-slot job runs.
	Lead time.Duration
	// TriggerLead is how long before each cycle start the periodic trigger
	// fires and bootstraps the cycle: Lead + 10 s, at most half a cycle.
	// RunOnStart bootstraps the cycle that starts within TriggerLead (plus
	// a second) of the client becoming leader, else the current one.
	TriggerLead time.Duration
	// Shift is the task's phase in slots: the accounts of bucket slot k are
	// synced in slot Plan.Shift(k, Shift).
	Shift int
	// PlanID identifies the plan (cycle, slots, seed, shift) that bootstrap
	// and per-slot jobs carry in their args' "plan" field.
	PlanID string
}

// Due returns when the account is due in the cycle starting at
// cycleStart: its slot's start plus its offset, or, for a calendar-month
// task, the month's start plus the account's fraction of the month.
func (i TaskInfo) Due(cycleStart time.Time, id uuid.UUID) time.Time {
	if i.Month != nil {
		return i.Month.Target(cycleStart, i.Seed, id)
	}
	return i.Plan.ShiftedTarget(cycleStart, i.Seed, id, i.Shift)
}

// SlotStartOf returns when the slot serving the account in the cycle
// starting at cycleStart starts (by hash placement): its per-slot job runs
// Lead before it.
func (i TaskInfo) SlotStartOf(cycleStart time.Time, id uuid.UUID) time.Time {
	if i.Month != nil {
		return i.Month.DayStart(cycleStart, i.Month.DayOf(cycleStart, i.Seed, id))
	}
	return i.Plan.SlotStart(cycleStart, i.Plan.Shift(i.Plan.SlotOf(id), i.Shift))
}

// Task returns the validated form of the named task.
func (s *Scheduler) Task(taskName string) (TaskInfo, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return TaskInfo{}, err
	}
	return TaskInfo{Name: spec.Name, Plan: spec.Plan, Month: spec.Month, Schedule: spec.Schedule, Seed: spec.Seed, Lead: spec.Lead, TriggerLead: spec.TriggerLead, Shift: spec.Shift, PlanID: spec.PlanID}, nil
}

// insertPunctual is the insert hook of Task.Punctual: a per-slot or sync
// job of a punctual task that River would insert scheduled (its time is
// ahead) is inserted available instead. River's fetch takes only available
// jobs whose scheduled_at has come (JobGetAvailable), so it starts at its
// time, at the next fetch of any node, not at the next run of River's
// scheduler on the leader (every 5 s, and not at all while a new leader is
// elected).
func (s *Scheduler) insertPunctual(_ context.Context, params *rivertype.JobInsertParams) error {
	if params.State != rivertype.JobStateScheduled {
		return nil
	}
	var task string
	switch a := params.Args.(type) {
	case syncjob.Args:
		task = a.Task
	case *syncjob.Args:
		task = a.Task
	case perslot.Args:
		task = a.Task
	case *perslot.Args:
		task = a.Task
	default:
		return nil
	}
	if s.punctual[task] {
		params.State = rivertype.JobStateAvailable
	}
	return nil
}

// FlushOutcomes writes the sync outcomes this process counted and has not
// written to the cycles' ledger rows yet. The sync workers write them
// every 500 ms by themselves; call it after River's client stopped
// (Client.Stop) so that a graceful shutdown loses none of them.
func (s *Scheduler) FlushOutcomes(ctx context.Context) error {
	var errs []error
	for _, w := range s.syncWorkers {
		errs = append(errs, w.FlushOutcomes(ctx))
	}
	return errors.Join(errs...)
}
