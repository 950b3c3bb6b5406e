package syncjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/upstream"
)

// Reasons a sync job completes without calling Sync, recorded as its
// output ({"riverslot_skipped": reason}) and in the riverslot.sync.skipped
// metric.
const (
	// SkippedStale: the job started after its NotAfter, less than half a
	// cycle before the account's next regular sync (it waited in the queue
	// through an outage, or its cycle was superseded).
	SkippedStale = "stale"
)

// OutputSkipped is the key of a skipped sync job's output.
const OutputSkipped = "riverslot_skipped"

// OutputNotAfter is the key, in a stale sync job's output, of the NotAfter
// it was judged by (RFC 3339): the fan-out writes it into the args of
// late-spread syncs only, the worker derives the others' (Args.NotAfter).
const OutputNotAfter = "not_after"

// SyncFunc is the application's work for one account. Returning an error
// makes River retry the job with its usual backoff, up to the task's
// MaxAttempts.
type SyncFunc func(ctx context.Context, accountID uuid.UUID, job *river.Job[Args]) error

// SkipFunc hears of a sync completed without calling its SyncFunc, and why
// (SkippedStale, or the upstream's upstream_throttled or upstream_down),
// once per job, before the job completes. It must be quick and must not
// fail the job: the skip stands whatever it does.
type SkipFunc func(ctx context.Context, accountID uuid.UUID, job *river.Job[Args], reason string)

// Worker works sync jobs for one or more tasks.
type Worker struct {
	river.WorkerDefaults[Args]

	logger *slog.Logger
	pool   *pgxpool.Pool
	tasks  map[string]workerTask

	// logged holds the (task, cycle, slot, reason) whose skipped syncs were
	// logged: once per slot, not per account.
	loggedMu sync.Mutex
	logged   map[string]bool

	// cycles caches, per task, plan and cycle start, what the cycle's
	// record gives a sync's NotAfter: one ledger read per cycle and node
	// (more when jobs start together before it is cached, or reads fail).
	cyclesMu sync.Mutex
	cycles   map[cycleKey]cycleInfo

	// waits lengthens each wait of a job for an unreachable database.
	waits taskspec.Waits

	// inProcess counts, per task and upstream, the syncs waiting in
	// process on this node (for their start, Decision.Delay, or for a
	// lease): at most InProcessPerUpstream, so that one upstream's
	// backlog cannot hold the workers the other upstreams need.
	inProcessMu sync.Mutex
	inProcess   map[[2]string]int
	// batch groups this node's limiter statements of one upstream that
	// come at the same moment.
	batch upstream.Batcher

	// tally counts how this node's sync jobs ended, per cycle, into the
	// cycles' rows in the ledger.
	tally ledger.Tally
}

type cycleKey struct {
	task  string
	plan  taskspec.PlanKey
	start time.Time
}

type cycleInfo struct {
	spec     *taskspec.Spec // the plan's spec, nil when the plan is unreadable
	cycleEnd time.Time
}

type workerTask struct {
	spec   *taskspec.Spec
	sync   SyncFunc
	onSkip SkipFunc
}

// NewWorker returns a sync worker. riverslot builds it.
func NewWorker(pool *pgxpool.Pool, logger *slog.Logger) *Worker {
	w := &Worker{logger: logger, pool: pool, tasks: make(map[string]workerTask), logged: make(map[string]bool), cycles: make(map[cycleKey]cycleInfo)}
	w.tally.Exec = func(ctx context.Context, sql string, args ...any) error {
		_, err := pool.Exec(ctx, sql, args...)
		return err
	}
	var warned atomic.Bool
	w.tally.OnError = func(err error) {
		level := slog.LevelDebug
		if !warned.Swap(true) {
			level = slog.LevelWarn
		}
		msg := "riverslot: could not add sync outcomes to the ledger; they are kept and written with the next ones"
		if errors.Is(err, ledger.ErrMissing) || errors.Is(err, ledger.ErrOutdated) {
			msg = "riverslot: could not add sync outcomes to the ledger, which is missing or outdated: they are dropped; run riverslot.Migrate"
		}
		logger.Log(context.Background(), level, msg, slog.String("error", err.Error()))
	}
	return w
}

// FlushOutcomes writes the sync outcomes the worker counted and has not
// written yet (it writes them every ledger.TallyInterval by itself).
func (w *Worker) FlushOutcomes(ctx context.Context) error { return w.tally.Flush(ctx) }

// AddTask makes the worker serve the task of spec with sync.
func (w *Worker) AddTask(spec *taskspec.Spec, sync SyncFunc) {
	w.tasks[spec.Name] = workerTask{spec: spec, sync: sync}
}

// OnSkip sets the task's SkipFunc (none by default).
func (w *Worker) OnSkip(task string, f SkipFunc) {
	t := w.tasks[task]
	t.onSkip = f
	w.tasks[task] = t
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

// Work checks that the sync is not stale (NotAfter) and that the account
// still exists and matches the filter, then calls the task's SyncFunc
// (through its upstream's limits, when it has any). A stale sync completes
// without calling it. How the job ended is counted in its cycle's row in
// the ledger.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	var e ending
	defer func() {
		// A Sync that panics ends its attempt as an error does (River
		// recovers it, with the original frames still on the stack).
		if r := recover(); r != nil {
			w.count(ctx, job, &e, fmt.Errorf("panic: %v", r))
			panic(r)
		}
	}()
	err := w.work(ctx, job, &e)
	w.count(ctx, job, &e, err)
	return err
}

// ending is how a sync job that returned nil ended without calling Sync:
// skipped for a reason, or its account gone.
type ending struct {
	skipped string
	gone    bool
}

// count adds the job's outcome, if it ended, to its cycle's row in the
// ledger (through the node's Tally): a snoozed job, a failed attempt River
// will retry, and one interrupted by its client's stop have not ended.
func (w *Worker) count(ctx context.Context, job *river.Job[Args], e *ending, err error) {
	var o ledger.Outcome
	var (
		snooze *rivertype.JobSnoozeError
		cancel *rivertype.JobCancelError
	)
	switch {
	case err == nil && e.skipped == SkippedStale:
		o = ledger.OutcomeStale
	case err == nil && e.skipped != "":
		o = ledger.OutcomeUpstream
	case err == nil && e.gone:
		o = ledger.OutcomeGone
	case err == nil:
		o = ledger.OutcomeSynced
	case errors.As(err, &snooze):
		return
	case errors.As(err, &cancel), errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely):
		o = ledger.OutcomeCancelled
	case errors.Is(ctx.Err(), context.Canceled):
		// Its client is stopping (StopAndCancel, a soft stop's timeout):
		// River makes the job available again, its attempt not used.
		return
	case job.Attempt >= job.MaxAttempts:
		o = ledger.OutcomeFailed
	default:
		return
	}
	plan, ok, perr := taskspec.PlanFromTags(job.Tags)
	if !ok || perr != nil {
		return // not made by a fan-out: no cycle row to count in
	}
	client, cerr := river.ClientFromContextSafely[pgx.Tx](ctx)
	if cerr != nil {
		return
	}
	var lateness time.Duration
	if job.AttemptedAt != nil {
		lateness = job.AttemptedAt.Sub(job.ScheduledAt)
	}
	w.tally.Add(client.Schema(), ledger.CycleKey{Task: job.Args.Task, Plan: plan.String(), Start: job.Args.CycleStart}, o, lateness)
}

func (w *Worker) work(ctx context.Context, job *river.Job[Args], e *ending) error {
	t, ok := w.tasks[job.Args.Task]
	if !ok {
		return river.JobCancel(fmt.Errorf("no riverslot task %q is registered in this process; register it or delete the job", job.Args.Task))
	}
	if job.Args.AccountID == uuid.Nil {
		return river.JobCancel(errors.New("sync job has no account_id"))
	}
	if job.Attempt == 1 && job.AttemptedAt != nil && len(job.AttemptedBy) == 1 {
		// The job's first run only: a retry's, a snoozed job's or a
		// rescued job's scheduled time is River's, not the account's.
		// River appends a client to AttemptedBy (a public field of the
		// job row) each time it starts the job, snoozes included (a
		// snooze gives its attempt back); its metadata's snooze count is
		// River's own, unpublished, key.
		t.spec.Metrics.SyncStarted(ctx, t.spec.Name, job.ScheduledAt, *job.AttemptedAt)
	}

	// Stale first: it needs no query but, once per cycle and node, the
	// cycle's record.
	started := time.Now()
	if job.AttemptedAt != nil {
		started = *job.AttemptedAt
	}
	notAfter, err := w.notAfter(ctx, t.spec, job)
	if err != nil {
		return err
	}
	if !notAfter.IsZero() && started.After(notAfter) {
		if held, err := w.staleByUpstream(ctx, t.spec, job); err != nil {
			return err
		} else if held != "" {
			msg := "riverslot: sync jobs completed without calling Sync: their upstream's circuit breaker held them past their NotAfter (the upstream was down); the next cycle covers them"
			if held == SkippedUpstreamThrottled {
				msg = "riverslot: sync jobs completed without calling Sync: their place in their upstream's rate limit came past their NotAfter; the next cycle covers them"
			}
			e.skipped = held
			return w.skip(ctx, t.spec, job, held, msg, OutputNotAfter, notAfter.UTC().Format(time.RFC3339Nano), "upstream", job.Args.Upstream)
		}
		e.skipped = SkippedStale
		return w.skip(ctx, t.spec, job, SkippedStale, "riverslot: stale sync jobs completed without calling Sync: they started less than half a cycle before their accounts' next regular sync, which covers them",
			OutputNotAfter, notAfter.UTC().Format(time.RFC3339Nano))
	}

	var exists bool
	if err := t.spec.AccountsDB(w.pool).QueryRow(ctx, t.spec.SQL.Exists, job.Args.AccountID).Scan(&exists); err != nil {
		if taskspec.Unreachable(err) {
			// The accounts database is down: wait for it without using an
			// attempt, until the sync would be stale (then the next cycle
			// covers the account, as for any stale sync).
			wait := w.waits.Next(job.ID)
			if !notAfter.IsZero() {
				if left := time.Until(notAfter); left < wait {
					wait = max(left, 0) + 100*time.Millisecond
				}
			}
			w.warnOnce(ctx, t.spec, job, "unreachable", "riverslot: the accounts database is unreachable; sync jobs wait for it (snoozed, no attempt used) until their NotAfter",
				slog.String("error", err.Error()), slog.Duration("wait", wait))
			return river.JobSnooze(wait)
		}
		return fmt.Errorf("error checking account %s of task %q: %w", job.Args.AccountID, t.spec.Name, err)
	}
	if !exists {
		w.logger.DebugContext(ctx, "riverslot: account gone or filtered out since fan-out; nothing to sync",
			slog.String("task", t.spec.Name), slog.String("account_id", job.Args.AccountID.String()))
		e.gone = true
		return w.forget(ctx, t.spec, job)
	}
	return w.syncThrough(ctx, t, job, notAfter, e)
}

// notAfter returns the job's NotAfter: its own when the fan-out wrote one
// (a late-spread sync), else, for a job tagged with its plan, the one the
// fan-out would have written for a sync at its regular time (the account's
// offset in its slot), with the cycle's end from the cycle's ledger record;
// zero (no limit) for a job with neither.
func (w *Worker) notAfter(ctx context.Context, nodeSpec *taskspec.Spec, job *river.Job[Args]) (time.Time, error) {
	if !job.Args.NotAfter.IsZero() {
		return job.Args.NotAfter, nil
	}
	plan, ok, err := taskspec.PlanFromTags(job.Tags)
	if !ok {
		return time.Time{}, nil
	}
	if err != nil {
		// Not a plan this version reads: no limit, as for a job without
		// one (the sync runs).
		w.warnOnce(ctx, nodeSpec, job, "plan-unreadable", "riverslot: sync jobs name a plan this node cannot read; they run without a NotAfter", slog.String("error", err.Error()))
		return time.Time{}, nil
	}
	info, err := w.cycle(ctx, nodeSpec, job, plan)
	if err != nil || info.spec == nil {
		return time.Time{}, err
	}
	return info.spec.RegularNotAfter(job.Args.CycleStart, info.cycleEnd, job.Args.Slot, job.Args.AccountID), nil
}

// cycle returns the cached cycleInfo of the job's cycle, reading the
// cycle's ledger record on a miss.
func (w *Worker) cycle(ctx context.Context, nodeSpec *taskspec.Spec, job *river.Job[Args], plan taskspec.PlanKey) (cycleInfo, error) {
	key := cycleKey{task: job.Args.Task, plan: plan, start: job.Args.CycleStart.UTC()}
	w.cyclesMu.Lock()
	info, ok := w.cycles[key]
	w.cyclesMu.Unlock()
	if ok {
		return info, nil
	}
	spec, err := nodeSpec.ForPlan(key.plan, key.start)
	if err != nil {
		// Not a plan this version reads: no limit, as for a job without
		// one (the sync runs).
		w.warnOnce(ctx, nodeSpec, job, "plan-unrunnable", "riverslot: sync jobs name a plan this node cannot run; they run without a NotAfter", slog.String("plan", key.plan.String()), slog.String("error", err.Error()))
	} else {
		info.spec = spec
		info.cycleEnd = spec.CycleEnd(key.start)
		client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
		if err != nil {
			return cycleInfo{}, err
		}
		rec, found, err := ledger.New(client.Schema()).CycleRecord(ctx, w.pool, key.task, key.plan.String(), key.start)
		if err != nil {
			// The guard is best effort: judge this job by the plan's own
			// grid and read the record again for the next one, rather
			// than fail the sync.
			w.warnOnce(ctx, nodeSpec, job, "ledger", "riverslot: could not read the cycle's record in the ledger; sync jobs are judged stale by the plan's grid until it answers",
				slog.String("error", err.Error()))
			return info, nil
		}
		if found && !rec.End.IsZero() {
			info.cycleEnd = rec.End
			if !rec.Deadline.IsZero() {
				// The cycle's own LateGrace, as its bootstrap recorded it
				// (Deadline = End + Cycle/2 + LateGrace): a deploy that
				// changes LateGrace does not move the NotAfter of syncs
				// already queued.
				if grace := rec.Deadline.Sub(rec.End) - spec.CycleLen(key.start)/2; grace >= 0 && grace != spec.LateGrace {
					own := *spec
					own.LateGrace = grace
					info.spec = &own
				}
			}
		}
	}
	w.cyclesMu.Lock()
	if len(w.cycles) >= 1_000 {
		clear(w.cycles)
	}
	w.cycles[key] = info
	w.cyclesMu.Unlock()
	return info, nil
}

// skip completes the job without calling Sync: it records the reason as
// the job's output and in the metrics, and logs once per slot and reason.
// kv are extra key-value pairs of the output.
func (w *Worker) skip(ctx context.Context, spec *taskspec.Spec, job *river.Job[Args], reason, msg string, kv ...string) error {
	spec.Metrics.SyncSkipped(ctx, spec.Name, reason)
	if f := w.tasks[spec.Name].onSkip; f != nil {
		f(ctx, job.Args.AccountID, job, reason)
	}
	w.warnOnce(ctx, spec, job, reason, msg, slog.String("reason", reason))
	out := map[string]string{OutputSkipped: reason}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return river.RecordOutput(ctx, out)
}

// warnOnce logs msg at warn once per task, cycle, slot and key.
func (w *Worker) warnOnce(ctx context.Context, spec *taskspec.Spec, job *river.Job[Args], key, msg string, attrs ...slog.Attr) {
	k := spec.Name + "|" + job.Args.CycleStart.UTC().Format(time.RFC3339Nano) + "|" + fmt.Sprint(job.Args.Slot) + "|" + key
	w.loggedMu.Lock()
	first := !w.logged[k]
	if first {
		if len(w.logged) >= 10_000 {
			clear(w.logged)
		}
		w.logged[k] = true
	}
	w.loggedMu.Unlock()
	if !first {
		return
	}
	args := []any{slog.String("task", spec.Name), slog.Time("cycle_start", job.Args.CycleStart),
		slog.Int("slot", job.Args.Slot),
		slog.String("first_account_id", job.Args.AccountID.String())}
	for _, a := range attrs {
		args = append(args, a)
	}
	w.logger.WarnContext(ctx, msg, args...)
}
