package perslot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// stepFanOut is the name of the resumable step that holds the cursor.
const stepFanOut = "fan_out"

// ErrLostOwnership is returned by a fan-out attempt that finds its job no
// longer running under its attempt number, because River rescued it and
// another attempt took over. The attempt stops without inserting anything.
var ErrLostOwnership = errors.New("per-slot job is no longer owned by this attempt")

// ErrKeysetStalled is returned by a fan-out batch whose page of accounts does
// not advance strictly past the cursor in (bucket, id) order or leaves the
// slot's bucket range. The batch inserts nothing: fanning out such a page
// could loop over the same accounts forever. It means the selection query
// does not return what it should (a filter, collation or index surprise).
var ErrKeysetStalled = errors.New("per-slot page did not advance past the cursor")

// ErrDuplicate is the cancellation error of a per-slot job whose slot the
// ledger records for another job: the slot is that job's to fan out.
var ErrDuplicate = errors.New("the ledger records another per-slot job for this slot")

// Result is recorded as the per-slot job's output when the fan-out finishes.
type Result struct {
	Accounts int64 `json:"accounts"`
	Inserted int64 `json:"inserted"`
	Skipped  int64 `json:"skipped"`
	Batches  int   `json:"batches"`
}

// Worker works per-slot jobs for one or more tasks.
type Worker struct {
	river.WorkerDefaults[Args]

	logger *slog.Logger
	pool   *pgxpool.Pool
	specs  map[string]*taskspec.Spec

	// beforeBatch, when set (tests only), runs before each batch's
	// transaction begins; batch counts from 1 across attempts. An error
	// fails the batch, as a lost connection would.
	beforeBatch func(ctx context.Context, job *river.Job[Args], batch int) error

	// waits lengthens each wait of a job for an unreachable accounts
	// database.
	waits taskspec.Waits
}

// NewWorker returns a per-slot worker that selects accounts through pool.
// riverslot builds it.
func NewWorker(pool *pgxpool.Pool, logger *slog.Logger) *Worker {
	return &Worker{logger: logger, pool: pool, specs: make(map[string]*taskspec.Spec)}
}

// AddTask makes the worker serve the task of spec.
func (w *Worker) AddTask(spec *taskspec.Spec) { w.specs[spec.Name] = spec }

// Register adds the worker to workers.
func (w *Worker) Register(workers *river.Workers) error {
	return river.AddWorkerSafely(workers, river.Worker[Args](w))
}

// Timeout returns the task's per-slot timeout.
func (w *Worker) Timeout(job *river.Job[Args]) time.Duration {
	if spec, ok := w.specs[job.Args.Task]; ok {
		return spec.PerSlotTimeout
	}
	return 0
}

// retryBackoffMax caps the per-slot retry backoff.
const retryBackoffMax = 30 * time.Second

// NextRetry schedules the retry of a failed or timed-out fan-out soon: 1 s,
// 2 s, 4 s, 8 s, 16 s, then every 30 s. Its slot is current, and the retry
// resumes after the last committed batch, so there is nothing to gain from
// River's default backoff (attempt^4 seconds: 16 s, 81 s, 256 s, ...), which
// would push a slot's accounts past their window after a few timeouts.
func (w *Worker) NextRetry(job *river.Job[Args]) time.Time {
	return time.Now().Add(retryBackoff(job.Attempt))
}

func retryBackoff(attempt int) time.Duration {
	d := time.Second << min(max(attempt-1, 0), 5)
	return min(d, retryBackoffMax)
}

// Work fans the slot out into sync jobs, resuming from the persisted cursor.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	spec, ok := w.specs[job.Args.Task]
	if !ok {
		return river.JobCancel(fmt.Errorf("no riverslot task %q is registered in this process; register it or delete the job", job.Args.Task))
	}
	nodeSpec := spec
	spec, err := spec.ForPlan(job.Args.Plan, job.Args.CycleStart)
	if err != nil {
		return river.JobCancel(fmt.Errorf("error reading the plan of per-slot job: %w", err))
	}
	if spec != nodeSpec {
		w.logger.WarnContext(ctx, "riverslot: per-slot job was made for another plan than this node's; running it under its own plan (Cycle or Seed changed, or nodes of a rolling deploy disagree)",
			slog.String("task", spec.Name), slog.Time("cycle_start", job.Args.CycleStart), slog.Int("slot", job.Args.Slot),
			slog.String("job_plan", job.Args.Plan.String()), slog.String("node_plan", nodeSpec.PlanID), slog.Int64("job_id", job.ID))
	}
	if slots := spec.Slots(job.Args.CycleStart); job.Args.Slot < 0 || job.Args.Slot >= slots {
		return river.JobCancel(fmt.Errorf("slot %d out of range for task %q with %d slots", job.Args.Slot, spec.Name, slots))
	}
	pins, err := cyclePins(spec, job.Args)
	if err != nil {
		return river.JobCancel(err)
	}
	if nodePins := nodeSpec.PinsRef(); job.Args.Placement != "" && (pins == nil) != (nodePins == nil) {
		w.logger.InfoContext(ctx, "riverslot: per-slot job follows its cycle's placement, not this node's Weight (a rolling deploy or rollback changed it)",
			slog.String("task", spec.Name), slog.Time("cycle_start", job.Args.CycleStart), slog.Int("slot", job.Args.Slot),
			slog.String("cycle_placement", job.Args.Placement), slog.Bool("node_weighted", nodePins != nil), slog.Int64("job_id", job.ID))
	}
	if job.AttemptedAt != nil {
		spec.Metrics.SlotStarted(ctx, spec.Name, job.Args.Slot, job.Attempt, job.ScheduledAt, *job.AttemptedAt)
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	led := ledger.New(client.Schema())
	owner, recorded, err := led.SlotJob(ctx, w.pool, spec.Name, spec.PlanID, job.Args.CycleStart, job.Args.Slot)
	if err != nil {
		return err
	}
	if recorded && owner != 0 && owner != job.ID {
		return river.JobCancel(fmt.Errorf("%w (slot %d of task %q, cycle %s: job %d, this is job %d)",
			ErrDuplicate, job.Args.Slot, spec.Name, job.Args.CycleStart.UTC().Format(time.RFC3339), owner, job.ID))
	}

	if err := led.SlotStarted(ctx, w.pool, spec.Name, spec.PlanID, job.Args.CycleStart, job.Args.Slot, job.ID); err != nil {
		// Only Status's "fanning out" depends on it: the fan-out goes on.
		w.logger.WarnContext(ctx, "riverslot: could not record the slot's start in the ledger (run riverslot.Migrate after upgrading)",
			slog.String("task", spec.Name), slog.Int("slot", job.Args.Slot), slog.String("error", err.Error()))
	}

	river.ResumableStepCursor(ctx, stepFanOut, nil, func(ctx context.Context, cursor fanOutCursor) error {
		err := w.fanOut(ctx, client, spec, pins, job, cursor)
		if err != nil && taskspec.Unreachable(err) {
			// The accounts database is down: the slot waits for it,
			// snoozed without using an attempt, as long as its late window
			// lasts (its accounts can still be placed); past it, the
			// error counts as any other.
			cycleEnd := job.Args.CycleEnd
			if cycleEnd.IsZero() {
				cycleEnd = spec.CycleEnd(job.Args.CycleStart)
			}
			deadline := spec.LateDeadline(job.Args.CycleStart, cycleEnd, spec.SlotStart(job.Args.CycleStart, job.Args.Slot))
			if left := time.Until(deadline); left > 0 {
				wait := min(w.waits.Next(job.ID), left+100*time.Millisecond)
				w.logger.WarnContext(ctx, "riverslot: the accounts database is unreachable; the per-slot job waits for it (snoozed, no attempt used) until its slot's late window ends",
					slog.String("task", spec.Name), slog.Time("cycle_start", job.Args.CycleStart), slog.Int("slot", job.Args.Slot),
					slog.Time("late_window_end", deadline), slog.Duration("wait", wait), slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
				// Status says why the slot waits.
				if lerr := led.SlotWaiting(context.WithoutCancel(ctx), w.pool, spec.Name, spec.PlanID, job.Args.CycleStart, job.Args.Slot, job.ID,
					"waiting for the accounts database (unreachable) until "+deadline.UTC().Format(time.RFC3339)+": "+err.Error()); lerr != nil {
					w.logger.WarnContext(ctx, "riverslot: could not record why the slot waits in the ledger", slog.String("error", lerr.Error()))
				}
				return river.JobSnooze(wait)
			}
		}
		if err != nil && job.Attempt >= job.MaxAttempts {
			// The last attempt: River discards the job. The ledger says
			// so, for whoever reads the cycle after River deletes it.
			if lerr := led.SlotFailed(context.WithoutCancel(ctx), w.pool, spec.Name, spec.PlanID, job.Args.CycleStart, job.Args.Slot, job.ID, err.Error()); lerr != nil {
				w.logger.WarnContext(ctx, "riverslot: could not record the slot's failure in the ledger", slog.String("task", spec.Name),
					slog.Int("slot", job.Args.Slot), slog.String("error", lerr.Error()))
			}
		}
		if errors.Is(err, ErrDuplicate) {
			w.logger.WarnContext(ctx, "riverslot: per-slot job cancelled: the ledger records another per-slot job for its slot, which fans it out",
				slog.String("task", spec.Name), slog.Time("cycle_start", job.Args.CycleStart), slog.Int("slot", job.Args.Slot),
				slog.Int64("job_id", job.ID), slog.String("error", err.Error()))
			return err
		}
		if err != nil {
			w.logger.WarnContext(ctx, "riverslot: per-slot fan-out failed; River retries it from its last committed batch",
				slog.String("task", spec.Name), slog.Time("cycle_start", job.Args.CycleStart), slog.Int("slot", job.Args.Slot),
				slog.Int("attempt", job.Attempt), slog.Int("max_attempts", job.MaxAttempts), slog.Int64("job_id", job.ID),
				slog.String("error", err.Error()))
		}
		return err
	})
	return nil
}

// cyclePins returns the pins the job's cycle follows (nil: hash placement),
// as its bootstrap recorded them; jobs made before placements were
// recorded follow the node's own configuration.
func cyclePins(spec *taskspec.Spec, args Args) (*taskspec.PinsRef, error) {
	switch args.Placement {
	case PlacementHash:
		return nil, nil
	case PlacementPinned:
		if args.Pins == nil || args.Pins.Task == "" || args.Pins.Plan == "" {
			return nil, fmt.Errorf("per-slot job of task %q has placement %q but no pins (task and plan); it was not made by riverslot's bootstrap", args.Task, args.Placement)
		}
		return args.Pins, nil
	case "":
		return spec.PinsRef(), nil
	}
	return nil, fmt.Errorf("per-slot job of task %q has unknown placement %q (want %q or %q); it was made by a newer riverslot: upgrade this node", args.Task, args.Placement, PlacementHash, PlacementPinned)
}

// batch is the state shared by the batches of one fan-out attempt.
type batch struct {
	spec                            *taskspec.Spec
	client                          *river.Client[pgx.Tx]
	job                             *river.Job[Args]
	lo, hi                          int
	cycleStart, cycleEnd, slotStart time.Time
	// slotLen is the slot's length and cycleLen the cycle's (a month's
	// day and the month, for a calendar-month task); split says the
	// range's first and last buckets may hold accounts of other slots (a
	// month's days split the buckets on their boundaries by InSlot).
	slotLen, cycleLen time.Duration
	split             bool
	fenceSQL          string
	params            []river.InsertManyParams
	opts              []river.InsertOpts
	syncTags          []string // the sync jobs' tags: the task's own and the plan's (taskspec.PlanTag)
	overlaps          []*overlap
	// pins is what the cycle follows (nil: hash placement), pinRead its
	// queries and pinArgs their leading (task, plan, cycle start): a
	// range page skips its accounts pinned in the cycle, and the accounts
	// pinned to this slot come in the pinned phase.
	pins    *taskspec.PinsRef
	pinRead taskspec.PinRead
	pinArgs []any
	pinSlot int // the slot this job's slot is in the pins' own task
	ledger  ledger.Ledger
	first   bool // the task's first cycle under FirstCycleAll
}

func (w *Worker) fanOut(ctx context.Context, client *river.Client[pgx.Tx], spec *taskspec.Spec, pins *taskspec.PinsRef, job *river.Job[Args], cursor fanOutCursor) error {
	slot := job.Args.Slot
	// The task's phase: slot k serves the buckets of slot k - Shift (a
	// month's day, the buckets due that day).
	lo, hi := spec.SlotBuckets(job.Args.CycleStart, slot)
	b := &batch{
		spec: spec, client: client, job: job,
		lo: lo, hi: hi,
		cycleStart: job.Args.CycleStart,
		cycleEnd:   job.Args.CycleEnd,
		slotStart:  spec.SlotStart(job.Args.CycleStart, slot),
		slotLen:    spec.SlotLen(job.Args.CycleStart, slot),
		cycleLen:   spec.CycleLen(job.Args.CycleStart),
		split:      spec.Monthly(),
		pins:       pins,
		ledger:     ledger.New(client.Schema()),
		fenceSQL:   "SELECT attempt, state FROM " + riverjob.QualifiedTable(client.Schema()) + " WHERE id = $1 FOR UPDATE",
		params:     make([]river.InsertManyParams, 0, spec.BatchSize),
		opts:       make([]river.InsertOpts, spec.BatchSize),
		syncTags:   append(slices.Clip(spec.SyncOpts.Tags), taskspec.PlanTag(spec.PlanID)),
	}
	if b.cycleEnd.IsZero() {
		b.cycleEnd = spec.CycleEnd(b.cycleStart)
	}
	if pins != nil {
		b.pinRead = spec.PinRead(pins.Schema)
		b.pinArgs = []any{pins.Task, pins.Plan, pins.PinsCycle(b.cycleStart)}
		b.pinSlot = spec.Plan.Shift(slot, -pins.Shift)
	}
	// The cycle's record: when it was made (the overlap rule) and whether
	// it is the task's first, made after it started under FirstCycleAll.
	var own *ledger.Cycle
	if rec, ok, err := b.ledger.CycleRecord(ctx, w.pool, spec.Name, spec.PlanID, b.cycleStart); err != nil {
		return err
	} else if ok {
		own, b.first = &rec, rec.First
		// Late accounts are placed by the cycle's own late policy: a
		// deploy that changed LateGrace or LatePolicy mid-cycle does not
		// change what the cycle's earlier fan-outs and a later plan's
		// overlap rule took it to do.
		b.spec = spec.WithLate(rec.LatePolicy, rec.LateGrace)
	}
	overlaps, err := w.overlaps(ctx, client, spec, job, own)
	if err != nil {
		return err
	}
	b.overlaps = overlaps
	resumed := cursor.Started
	begun := time.Now()

	for {
		n, err := w.fanOutBatch(ctx, b, &cursor)
		if err != nil {
			return fmt.Errorf("error fanning out slot %d of task %q (cycle %s) after %d accounts: %w",
				slot, spec.Name, b.cycleStart.UTC().Format(time.RFC3339), cursor.Inserted+cursor.Skipped, err)
		}
		if n > 0 {
			w.logger.DebugContext(ctx, "riverslot: per-slot batch committed",
				slog.String("task", spec.Name), slog.Int("slot", slot), slog.Int("batch_size", n),
				slog.Int64("inserted", cursor.Inserted), slog.String("after_id", cursor.AfterID), slog.Int("after_bucket", cursor.Bucket))
		}
		if n < spec.BatchSize {
			if pins != nil && !cursor.Pinned {
				// The bucket range is done; the accounts pinned to this
				// slot follow. Persisted with their first batch: a retry
				// before it finds the range done again.
				cursor.Pinned, cursor.Started, cursor.Bucket, cursor.AfterID = true, false, 0, ""
				continue
			}
			break
		}
	}

	result := Result{Accounts: cursor.Inserted + cursor.Skipped, Inserted: cursor.Inserted, Skipped: cursor.Skipped, Batches: cursor.Batches}
	spec.Metrics.FanOutDone(ctx, spec.Name, time.Since(begun), result.Accounts)
	// Debug: one line per slot (128 a day at 24 h, 70 in a 50 s demo)
	// would drown the lines an operator must see; the ledger and the
	// metrics keep every fan-out.
	w.logger.DebugContext(ctx, "riverslot: slot fanned out",
		slog.String("task", spec.Name), slog.Time("cycle_start", b.cycleStart), slog.Int("slot", slot),
		slog.Int64("inserted", result.Inserted), slog.Int64("skipped_late", result.Skipped),
		slog.Int("batches", result.Batches), slog.Bool("resumed", resumed),
		slog.Duration("elapsed", time.Since(begun)))
	return river.RecordOutput(ctx, result)
}

// record records the slot's finished fan-out (totals of cursor) in the
// ledger, in tx. A slot the ledger records for another job (one that
// claimed it while this one ran) cancels this one: tx, with its inserts,
// is rolled back.
func (w *Worker) record(ctx context.Context, tx pgx.Tx, b *batch, cursor fanOutCursor) error {
	args := b.job.Args
	owned, err := b.ledger.RecordSlot(ctx, tx, b.spec.Name, b.spec.PlanID, args.CycleStart, args.Slot, b.job.ID, ledger.SlotResult{
		Accounts: cursor.Inserted + cursor.Skipped, RangeAccounts: cursor.RangeAccounts,
		Inserted: cursor.Inserted, Skipped: cursor.Skipped,
		LateSpread: cursor.LateSpread, LateSkipped: cursor.LateSkipped,
		Batches: cursor.Batches,
	})
	if err != nil {
		return err
	}
	if !owned {
		return b.duplicate(ctx, tx)
	}
	return nil
}

// duplicate returns the cancellation of a job whose slot the ledger, read
// in tx (which holds the row's lock), records for another job.
func (b *batch) duplicate(ctx context.Context, tx pgx.Tx) error {
	args := b.job.Args
	owner, _, err := b.ledger.SlotJob(ctx, tx, b.spec.Name, b.spec.PlanID, args.CycleStart, args.Slot)
	if err != nil {
		return err
	}
	return river.JobCancel(fmt.Errorf("%w (slot %d of task %q, cycle %s: job %d, this is job %d; this job's uncommitted batch is rolled back)",
		ErrDuplicate, args.Slot, b.spec.Name, args.CycleStart.UTC().Format(time.RFC3339), owner, b.job.ID))
}

// account is one row of a keyset page.
type account struct {
	ID       uuid.UUID
	Bucket   int
	Upstream string
}

// fanOutBatch selects, enqueues and checkpoints one batch in one transaction.
// On success it advances cursor and returns the number of accounts handled.
func (w *Worker) fanOutBatch(ctx context.Context, b *batch, cursor *fanOutCursor) (int, error) {
	spec, job := b.spec, b.job
	if w.beforeBatch != nil {
		if err := w.beforeBatch(ctx, job, cursor.Batches+1); err != nil {
			return 0, err
		}
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("error starting batch transaction: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit

	// Fence: only the attempt River is currently running may write. A zombie
	// attempt (rescued while still alive) finds a different attempt number.
	var (
		attempt int
		state   string
	)
	if err := tx.QueryRow(ctx, b.fenceSQL, job.ID).Scan(&attempt, &state); err != nil {
		return 0, fmt.Errorf("error locking per-slot job %d: %w", job.ID, err)
	}
	if attempt != job.Attempt || state != "running" {
		return 0, fmt.Errorf("%w (job %d is %s at attempt %d, this is attempt %d)", ErrLostOwnership, job.ID, state, attempt, job.Attempt)
	}

	// The accounts (and a weighted cycle's pins, stored next to them) are
	// read in this transaction when they live in River's database, else
	// with plain reads on the accounts pool: the inserts and the cursor
	// below commit together on River's database either way, so a batch
	// killed before its commit is read again and enqueued once.
	var aq querier = tx
	if spec.SeparateAccounts() {
		aq = spec.AccountsPool
	}
	var (
		after uuid.UUID
		rows  pgx.Rows
	)
	if cursor.Started {
		if after, err = uuid.Parse(cursor.AfterID); err != nil {
			return 0, fmt.Errorf("error parsing resume cursor %q: %w", cursor.AfterID, err)
		}
	}
	switch {
	case cursor.Pinned && cursor.Started:
		rows, err = aq.Query(ctx, b.pinRead.PinnedNextPage, append(b.pinArgs[:3:3], b.pinSlot, spec.BatchSize, after)...)
	case cursor.Pinned:
		rows, err = aq.Query(ctx, b.pinRead.PinnedFirstPage, append(b.pinArgs[:3:3], b.pinSlot, spec.BatchSize)...)
	case cursor.Started:
		rows, err = aq.Query(ctx, spec.SQL.NextPage, b.lo, b.hi, spec.BatchSize, cursor.Bucket, after)
	default:
		rows, err = aq.Query(ctx, spec.SQL.FirstPage, b.lo, b.hi, spec.BatchSize)
	}
	if err != nil {
		return 0, fmt.Errorf("error selecting accounts: %w", err)
	}
	accounts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[account])
	if err != nil {
		return 0, fmt.Errorf("error selecting accounts: %w", err)
	}
	// The last batch (a short page of the last phase) records the slot's
	// fan-out in the ledger in its own transaction.
	final := len(accounts) < spec.BatchSize && (b.pins == nil || cursor.Pinned)
	if len(accounts) == 0 {
		if final {
			if err := w.record(ctx, tx, b, *cursor); err != nil {
				return 0, err
			}
			if err := tx.Commit(ctx); err != nil {
				return 0, fmt.Errorf("error committing the slot's ledger row: %w", err)
			}
		}
		return 0, nil
	}
	if err := checkKeyset(accounts, b.lo, b.hi, *cursor, spec.BatchSize); err != nil {
		return 0, err
	}
	var pinnedElsewhere map[uuid.UUID]bool
	if b.pins != nil && !cursor.Pinned {
		if pinnedElsewhere, err = pagePins(ctx, aq, b, accounts); err != nil {
			return 0, err
		}
	}
	if err := b.loadOverlapPins(ctx, aq, accounts); err != nil {
		return 0, err
	}

	var (
		now                 = time.Now()
		params              = b.params[:0]
		skipped             int64
		spread, lateSkipped int64 // for the metrics
		others              int64 // accounts of a split bucket due on another day
	)
	for i, a := range accounts {
		if pinnedElsewhere[a.ID] {
			continue // pinned: served by the slot it is pinned to
		}
		if b.split && (a.Bucket == b.lo || a.Bucket == b.hi) && !spec.InSlot(b.cycleStart, job.Args.Slot, a.ID) {
			others++
			continue // due on the neighbouring day, whose fan-out serves it
		}
		hash := slotplan.Hash(spec.Seed, a.ID)
		regular := b.slotStart.Add(slotplan.OffsetIn(hash, b.slotLen))
		if b.split {
			regular = spec.Regular(b.cycleStart, job.Args.Slot, a.ID)
		}
		p := place(spec, now, b.cycleStart, b.cycleEnd, b.slotStart, b.slotLen, regular, hash, b.first)
		switch {
		case p.late && p.skip:
			lateSkipped++
		case p.late:
			spread++
		}
		if !p.skip && syncedByOlderCycle(b.overlaps, a.ID, p.target, b.cycleStart, b.cycleLen) {
			p.skip = true
		}
		if p.skip {
			skipped++
			continue
		}
		opts := &b.opts[i]
		*opts = spec.SyncOpts
		opts.Tags = b.syncTags
		opts.ScheduledAt = p.target
		args := syncjob.NewArgs(spec.Name, a.ID, b.cycleStart, job.Args.Slot)
		args.Upstream = a.Upstream
		if p.late {
			// Moved from its regular time: the worker could not derive
			// its NotAfter, as it does the regular syncs' from the plan
			// in their tags.
			args.NotAfter = spec.NotAfter(b.cycleStart, b.cycleEnd, spec.Regular(b.cycleStart, job.Args.Slot, a.ID), p.target).UTC()
		}
		params = append(params, river.InsertManyParams{Args: args, InsertOpts: opts})
	}
	if len(params) > 0 {
		if _, err := b.client.InsertManyFastTx(ctx, tx, params); err != nil {
			return 0, fmt.Errorf("error inserting %d sync jobs: %w", len(params), err)
		}
	}

	last := accounts[len(accounts)-1]
	next := fanOutCursor{
		Started:  true,
		Pinned:   cursor.Pinned,
		Bucket:   last.Bucket,
		AfterID:  last.ID.String(),
		Inserted: cursor.Inserted + int64(len(params)),
		Skipped:  cursor.Skipped + skipped,
		Batches:  cursor.Batches + 1,

		RangeAccounts: cursor.RangeAccounts,
		LateSpread:    cursor.LateSpread + spread,
		LateSkipped:   cursor.LateSkipped + lateSkipped,
	}
	if !cursor.Pinned {
		next.RangeAccounts += int64(len(accounts)) - others
	}
	if final {
		if err := w.record(ctx, tx, b, next); err != nil {
			return 0, err
		}
	} else {
		// Each batch claims the slot's row for this job in its own
		// transaction: of two per-slot jobs of one slot (a row without a
		// job, made before the ledger recorded them, or pruned), the
		// first to commit a batch fans it out; the other's batch is
		// rolled back and the job cancelled.
		args := job.Args
		owned, err := b.ledger.RecordProgress(ctx, tx, spec.Name, spec.PlanID, args.CycleStart, args.Slot, job.ID, ledger.SlotResult{
			Accounts: next.Inserted + next.Skipped, RangeAccounts: next.RangeAccounts, Inserted: next.Inserted, Skipped: next.Skipped,
			LateSpread: next.LateSpread, LateSkipped: next.LateSkipped, Batches: next.Batches,
		}, ledger.Cursor{Pinned: next.Pinned, Bucket: next.Bucket, AfterID: next.AfterID})
		if err != nil {
			return 0, err
		}
		if !owned {
			return 0, b.duplicate(ctx, tx)
		}
	}
	if _, err := river.ResumableSetStepCursorTx[*riverpgxv5.Driver](ctx, tx, job, next); err != nil {
		return 0, fmt.Errorf("error persisting resume cursor: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("error committing batch: %w", err)
	}
	spec.Metrics.BatchCommitted(ctx, spec.Name, int64(len(params)), spread, lateSkipped)
	*cursor = next
	return len(accounts), nil
}

// checkKeyset returns ErrKeysetStalled unless page holds at most limit rows,
// all in [lo, hi], in strictly increasing (bucket, id) order, the first past
// cursor; in the pinned phase, in strictly increasing id order. Postgres orders uuids by their bytes, as bytes.Compare does.
func checkKeyset(page []account, lo, hi int, cursor fanOutCursor, limit int) error {
	if len(page) > limit {
		return fmt.Errorf("%w: got %d rows for a page of %d", ErrKeysetStalled, len(page), limit)
	}
	prev, hasPrev := account{Bucket: cursor.Bucket}, cursor.Started
	if hasPrev {
		id, err := uuid.Parse(cursor.AfterID)
		if err != nil {
			return fmt.Errorf("error parsing resume cursor %q: %w", cursor.AfterID, err)
		}
		prev.ID = id
	}
	for i, a := range page {
		if cursor.Pinned {
			// Pinned accounts come by id alone, from any bucket.
			if hasPrev && bytes.Compare(a.ID[:], prev.ID[:]) <= 0 {
				return fmt.Errorf("%w: pinned row %d (id %s) is not after id %s", ErrKeysetStalled, i, a.ID, prev.ID)
			}
			prev, hasPrev = a, true
			continue
		}
		if a.Bucket < lo || a.Bucket > hi {
			return fmt.Errorf("%w: account %s has bucket %d outside the slot's range [%d, %d]", ErrKeysetStalled, a.ID, a.Bucket, lo, hi)
		}
		if hasPrev && (a.Bucket < prev.Bucket || a.Bucket == prev.Bucket && bytes.Compare(a.ID[:], prev.ID[:]) <= 0) {
			return fmt.Errorf("%w: row %d (bucket %d, id %s) is not after (bucket %d, id %s); check the task's Filter",
				ErrKeysetStalled, i, a.Bucket, a.ID, prev.Bucket, prev.ID)
		}
		prev, hasPrev = a, true
	}
	return nil
}

// pagePins returns the accounts of page (a page of the slot's bucket range)
// pinned in the cycle, to any slot: the page skips them. One range scan of
// the pins' bucket index between the page's first and last (bucket, id), so
// memory and time stay bounded by the page, even for a giant's home range
// whose every account is pinned elsewhere.
func pagePins(ctx context.Context, q querier, b *batch, page []account) (map[uuid.UUID]bool, error) {
	first, last := page[0], page[len(page)-1]
	rows, err := q.Query(ctx, b.pinRead.PageRange, append(b.pinArgs[:3:3], first.Bucket, first.ID, last.Bucket, last.ID)...)
	if err != nil {
		return nil, fmt.Errorf("error loading the pins of buckets %d-%d: %w", first.Bucket, last.Bucket, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("error loading the pins of buckets %d-%d: %w", first.Bucket, last.Bucket, err)
	}
	pinned := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		pinned[id] = true
	}
	return pinned, nil
}

// querier runs the account-side reads of a batch: its transaction, or the
// accounts pool (taskspec.Spec.AccountsPool).
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}
