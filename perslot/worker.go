package perslot

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
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
	"github.com/riverslot/riverslot/syncjob"
)

// stepFanOut is the name of the resumable step that holds the cursor.
const stepFanOut = "fan_out"

// ErrLostOwnership is returned by a fan-out attempt that finds its job no
// longer running under its attempt number, because River rescued it and
// another attempt took over. The attempt stops without inserting anything.
var ErrLostOwnership = errors.New("per-slot job is no longer owned by this attempt")

// Task is what the per-slot worker needs to know about one task. riverutil
// builds it from a validated riverutil.Task.
type Task struct {
	Name string
	Plan slotplan.Plan
	Seed uint64

	Schema, Table, IDColumn, Filter string

	BatchSize  int
	LatePolicy LatePolicy
	LateGrace  time.Duration
	Timeout    time.Duration

	// SyncKind and SyncOpts shape each sync job; SyncOpts.ScheduledAt is
	// ignored (each account gets its own).
	SyncKind string
	SyncOpts river.InsertOpts
}

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
	tasks  map[string]*workerTask
}

type workerTask struct {
	Task

	firstSQL string
	nextSQL  string
}

// NewWorker returns a per-slot worker that selects accounts through pool.
func NewWorker(pool *pgxpool.Pool, logger *slog.Logger) *Worker {
	if logger == nil {
		logger = slog.Default()
	}
	return &Worker{logger: logger, pool: pool, tasks: make(map[string]*workerTask)}
}

// AddTask makes the worker serve task.
func (w *Worker) AddTask(task Task) error {
	if _, ok := w.tasks[task.Name]; ok {
		return fmt.Errorf("per-slot worker already serves task %q", task.Name)
	}
	if task.BatchSize < 1 {
		return fmt.Errorf("task %q: BatchSize must be at least 1, got %d", task.Name, task.BatchSize)
	}
	if err := task.LatePolicy.Validate(); err != nil {
		return fmt.Errorf("task %q: %w", task.Name, err)
	}
	first, next := selectSQL(task)
	w.tasks[task.Name] = &workerTask{Task: task, firstSQL: first, nextSQL: next}
	return nil
}

// selectSQL returns the first-page and next-page keyset queries. Both walk
// the bucket index in (bucket, id) order; values are bind parameters.
func selectSQL(task Task) (first, next string) {
	id := pgx.Identifier{task.IDColumn}.Sanitize()
	expr := sqlbucket.Expr(task.IDColumn)
	table := sqlbucket.QualifiedTable(task.Schema, task.Table)
	filter := ""
	if task.Filter != "" {
		filter = " AND (" + task.Filter + ")"
	}
	head := "SELECT " + id + ", " + expr + " FROM " + table + " WHERE " + expr + " BETWEEN $1 AND $2"
	tail := filter + " ORDER BY " + expr + ", " + id + " LIMIT $3"
	first = head + tail
	next = head + " AND (" + expr + ", " + id + ") > ($4::int, $5::uuid)" + tail
	return first, next
}

// Register adds the worker to workers.
func (w *Worker) Register(workers *river.Workers) error {
	return river.AddWorkerSafely(workers, river.Worker[Args](w))
}

// Timeout returns the task's per-slot timeout.
func (w *Worker) Timeout(job *river.Job[Args]) time.Duration {
	if t, ok := w.tasks[job.Args.Task]; ok {
		return t.Timeout
	}
	return 0
}

// RetryBackoffMax caps the per-slot retry backoff.
const RetryBackoffMax = 30 * time.Second

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
	return min(d, RetryBackoffMax)
}

// Work fans the slot out into sync jobs, resuming from the persisted cursor.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	task, ok := w.tasks[job.Args.Task]
	if !ok {
		return river.JobCancel(fmt.Errorf("no riverslot task %q is registered in this process; register it with riverutil or delete the job", job.Args.Task))
	}
	if job.Args.Slot < 0 || job.Args.Slot >= task.Plan.Slots {
		return river.JobCancel(fmt.Errorf("slot %d out of range for task %q with %d slots (was the cycle changed?)", job.Args.Slot, task.Name, task.Plan.Slots))
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}

	river.ResumableStepCursor(ctx, stepFanOut, nil, func(ctx context.Context, cursor Cursor) error {
		return w.fanOut(ctx, client, task, job, cursor)
	})
	return nil
}

func (w *Worker) fanOut(ctx context.Context, client *river.Client[pgx.Tx], task *workerTask, job *river.Job[Args], cursor Cursor) error {
	var (
		plan       = task.Plan
		cycleStart = job.Args.CycleStart
		slot       = job.Args.Slot
		slotStart  = plan.SlotStart(cycleStart, slot)
		lo, hi     = plan.BucketRange(slot)
		fenceSQL   = "SELECT attempt, state FROM " + sqlbucket.QualifiedTable(client.Schema(), "river_job") + " WHERE id = $1 FOR UPDATE"
		params     = make([]river.InsertManyParams, 0, task.BatchSize)
		opts       = make([]river.InsertOpts, task.BatchSize)
		ids        = make([]uuid.UUID, 0, task.BatchSize)
		buckets    = make([]int, 0, task.BatchSize)
		resumedAt  = cursor
		begun      = time.Now()
	)

	for {
		n, last, lastBucket, err := w.fanOutBatch(ctx, client, task, job, &cursor, batchState{
			lo: lo, hi: hi, slot: slot, cycleStart: cycleStart, slotStart: slotStart,
			fenceSQL: fenceSQL, params: params, opts: opts, ids: ids, buckets: buckets,
		})
		if err != nil {
			return fmt.Errorf("error fanning out slot %d of task %q (cycle %s) after %d accounts: %w",
				slot, task.Name, cycleStart.UTC().Format(time.RFC3339), cursor.Inserted+cursor.Skipped, err)
		}
		if n > 0 {
			w.logger.DebugContext(ctx, "riverslot: per-slot batch committed",
				slog.String("task", task.Name), slog.Int("slot", slot), slog.Int("batch_size", n),
				slog.Int64("inserted", cursor.Inserted), slog.String("last_id", last.String()), slog.Int("last_bucket", lastBucket))
		}
		if n < task.BatchSize {
			break
		}
	}

	result := Result{Accounts: cursor.Inserted + cursor.Skipped, Inserted: cursor.Inserted, Skipped: cursor.Skipped, Batches: cursor.Batches}
	w.logger.InfoContext(ctx, "riverslot: slot fanned out",
		slog.String("task", task.Name), slog.Time("cycle_start", cycleStart), slog.Int("slot", slot),
		slog.Int64("inserted", result.Inserted), slog.Int64("skipped_late", result.Skipped),
		slog.Int("batches", result.Batches), slog.Bool("resumed", resumedAt.Started),
		slog.Duration("elapsed", time.Since(begun)))
	return river.RecordOutput(ctx, result)
}

type batchState struct {
	lo, hi                int
	slot                  int
	cycleStart, slotStart time.Time
	fenceSQL              string
	params                []river.InsertManyParams
	opts                  []river.InsertOpts
	ids                   []uuid.UUID
	buckets               []int
}

// fanOutBatch selects, enqueues and checkpoints one batch in one transaction.
// On success it advances cursor and returns the number of accounts handled.
func (w *Worker) fanOutBatch(ctx context.Context, client *river.Client[pgx.Tx], task *workerTask, job *river.Job[Args], cursor *Cursor, b batchState) (int, uuid.UUID, int, error) {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return 0, uuid.Nil, 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit

	// Fence: only the attempt River is currently running may write. A zombie
	// attempt (rescued while still alive) finds a different attempt number.
	var (
		attempt int
		state   string
	)
	if err := tx.QueryRow(ctx, b.fenceSQL, job.ID).Scan(&attempt, &state); err != nil {
		return 0, uuid.Nil, 0, fmt.Errorf("error locking per-slot job %d: %w", job.ID, err)
	}
	if attempt != job.Attempt || state != "running" {
		return 0, uuid.Nil, 0, fmt.Errorf("%w (job %d is %s at attempt %d, this is attempt %d)", ErrLostOwnership, job.ID, state, attempt, job.Attempt)
	}

	var rows pgx.Rows
	if cursor.Started {
		after, err := uuid.Parse(cursor.AfterID)
		if err != nil {
			return 0, uuid.Nil, 0, fmt.Errorf("error parsing resume cursor %q: %w", cursor.AfterID, err)
		}
		rows, err = tx.Query(ctx, task.nextSQL, b.lo, b.hi, task.BatchSize, cursor.Bucket, after)
		if err != nil {
			return 0, uuid.Nil, 0, fmt.Errorf("error selecting accounts: %w", err)
		}
	} else {
		rows, err = tx.Query(ctx, task.firstSQL, b.lo, b.hi, task.BatchSize)
		if err != nil {
			return 0, uuid.Nil, 0, fmt.Errorf("error selecting accounts: %w", err)
		}
	}
	ids, buckets := b.ids[:0], b.buckets[:0]
	for rows.Next() {
		var (
			id     uuid.UUID
			bucket int
		)
		if err := rows.Scan(&id, &bucket); err != nil {
			rows.Close()
			return 0, uuid.Nil, 0, fmt.Errorf("error scanning account: %w", err)
		}
		ids = append(ids, id)
		buckets = append(buckets, bucket)
	}
	if err := rows.Err(); err != nil {
		return 0, uuid.Nil, 0, fmt.Errorf("error selecting accounts: %w", err)
	}
	if len(ids) == 0 {
		return 0, uuid.Nil, 0, nil
	}

	var (
		now     = time.Now()
		window  = catchUpWindow(now, b.slotStart, task.Plan.SlotDuration, task.Plan.Cycle)
		params  = b.params[:0]
		skipped int64
	)
	for i, id := range ids {
		h := slotplan.Hash(task.Seed, id)
		target := b.slotStart.Add(slotplan.OffsetIn(h, task.Plan.SlotDuration))
		if now.Sub(target) > task.LateGrace {
			if task.LatePolicy == LatePolicySkip {
				skipped++
				continue
			}
			target = now.Add(slotplan.OffsetIn(h, window)).Truncate(time.Microsecond)
		}
		opts := &b.opts[i]
		*opts = task.SyncOpts
		opts.ScheduledAt = target
		params = append(params, river.InsertManyParams{
			Args:       syncjob.NewArgs(task.SyncKind, task.Name, id, b.cycleStart, b.slot),
			InsertOpts: opts,
		})
	}

	if len(params) > 0 {
		if _, err := client.InsertManyFastTx(ctx, tx, params); err != nil {
			return 0, uuid.Nil, 0, fmt.Errorf("error inserting %d sync jobs: %w", len(params), err)
		}
	}

	last, lastBucket := ids[len(ids)-1], buckets[len(buckets)-1]
	next := Cursor{
		Started:  true,
		Bucket:   lastBucket,
		AfterID:  last.String(),
		Inserted: cursor.Inserted + int64(len(params)),
		Skipped:  cursor.Skipped + skipped,
		Batches:  cursor.Batches + 1,
	}
	if _, err := river.ResumableSetStepCursorTx[*riverpgxv5.Driver](ctx, tx, job, next); err != nil {
		return 0, uuid.Nil, 0, fmt.Errorf("error persisting resume cursor: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, uuid.Nil, 0, fmt.Errorf("error committing batch: %w", err)
	}
	*cursor = next
	return len(ids), last, lastBucket, nil
}
