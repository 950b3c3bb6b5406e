package riverslot

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// This file holds what riverslot reads from riverslot's ledger
// (riverslot_ledger in River's schema, see internal/ledger and
// docs/scale.md): the cycles bootstrapped and what each slot's fan-out did,
// which outlive River's deletion of finished jobs.

func (s *Scheduler) ledger() ledger.Ledger { return ledger.New(s.riverSchema) }

// cyclePlanFromLedger returns the plan of the task's cycle at cycleStart
// as the ledger records its bootstrap (River may have deleted its jobs).
func (s *Scheduler) cyclePlanFromLedger(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time) (taskspec.PlanKey, bool, error) {
	return s.ledger().CyclePlan(ctx, s.pool, spec.Name, cycleStart, spec.PlanID)
}

// expectedCounts returns the accounts of each hash slot, as Status expects
// the cycle at cycleStart to select them: for each slot, the count its
// latest fan-out of an earlier cycle recorded in the ledger (a count taken
// once per cycle, by the fan-out itself, through the bucket index). Only
// when some slot has no such record (the task's first cycle under its
// plan) does it count the accounts table (hashCounts, cached a minute).
func (s *Scheduler) expectedCounts(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time) ([]int64, error) {
	if spec.Monthly() {
		// A month's day d is not the last month's day d (other buckets):
		// the earlier fan-outs' counts say nothing of it.
		return s.hashCounts(ctx, spec, cycleStart)
	}
	counts, complete, err := s.ledger().RangeCounts(ctx, s.pool, spec.Name, spec.PlanID, spec.Slots(cycleStart), cycleStart)
	if err != nil {
		return nil, err
	}
	if complete {
		return counts, nil
	}
	return s.hashCounts(ctx, spec, cycleStart)
}

// checkLedger returns an error when riverslot's ledger table is missing
// from River's schema (Migrate creates it). Before Configure, River's
// schema is unknown and the ledger is not checked.
func (s *Scheduler) checkLedger(ctx context.Context) error {
	if !s.configured {
		return nil
	}
	ok, err := s.ledger().Exists(ctx, s.pool)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w (schema %q)", ledger.ErrMissing, s.riverSchema)
	}
	if current, err := s.ledger().Current(ctx, s.pool); err != nil {
		return err
	} else if !current {
		return fmt.Errorf("%w (schema %q)", ledger.ErrOutdated, s.riverSchema)
	}
	return nil
}

// RowBudgetWarn is the number of rows in river_job above which Check warns:
// River users report slow counts, slow scheduling and autovacuum
// starvation from about 4-7 million rows.
const RowBudgetWarn = 5_000_000

// riverDefaultCompletedRetention is River's CompletedJobRetentionPeriod
// default.
const riverDefaultCompletedRetention = 24 * time.Hour

// RowBudget returns about how many rows a task keeps in River's job table
// with accounts accounts and River keeping completed jobs for retention
// (-1: forever): accounts x (Lead + slot + retention) / cycle, the pending
// sync jobs (queued Lead before their slot, started within it) and the
// completed ones River still keeps, plus one per-slot job per slot and
// cycle kept. A retention of -1 gives -1 (unbounded).
//
// For a calendar-month task it counts February's (28 days of 28 daily
// slots, estimateCycle): the shortest month keeps the most rows, and its
// Plan (the longest month's shape) would count a tenth fewer.
func RowBudget(accounts int64, info TaskInfo, retention time.Duration) int64 {
	if retention < 0 {
		return -1
	}
	cycleLen, slotLen, slots := estimateCycle(info.Plan, info.Month)
	cycle := float64(cycleLen)
	window := float64(info.Lead + slotLen + retention)
	cycles := window / cycle
	return int64(float64(accounts)*cycles) + int64(float64(slots+1)*max(cycles, 1))
}

// estimateCycle returns the cycle, slot length and slots the row and rate
// estimates of a task with plan (and month, for a calendar-month task)
// assume: the plan's, or for calendar months February's, the shortest
// month (taskspec.MonthMin, 28 days of 24 hours), in which the same
// accounts come the most often: the most syncs a second and the most rows.
// A monthly plan's Cycle is the longest month's (31 days), a bound for
// layouts, not for a rate.
func estimateCycle(plan slotplan.Plan, month *slotplan.Monthly) (cycle, slot time.Duration, slots int) {
	if month != nil {
		return taskspec.MonthMin, 24 * time.Hour, int(taskspec.MonthMin / (24 * time.Hour))
	}
	return plan.Cycle, plan.SlotDuration, plan.Slots
}

// checkRowBudget warns when a task's account estimate (pg_class.reltuples
// of its table: no count) and River's completed-job retention would keep
// more than RowBudgetWarn rows in river_job.
func (s *Scheduler) checkRowBudget(ctx context.Context, spec *taskspec.Spec) error {
	var estimate float64
	if err := spec.AccountsDB(s.pool).QueryRow(ctx, "SELECT coalesce((SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)), 0)", spec.QualifiedTable).Scan(&estimate); err != nil {
		return fmt.Errorf("error estimating the accounts of Table %s: %w", spec.QualifiedTable, err)
	}
	if estimate < 0 { // never analyzed
		return nil
	}
	retention := s.completedRetention
	if retention == 0 {
		retention = riverDefaultCompletedRetention
	}
	info, err := s.Task(spec.Name)
	if err != nil {
		return err
	}
	s.checkStartRate(ctx, spec, info, int64(estimate))
	rows := RowBudget(int64(estimate), info, retention)
	if rows >= 0 && rows <= RowBudgetWarn {
		return nil
	}
	s.log().WarnContext(ctx, "riverslot: this configuration keeps more rows in river_job than RowBudgetWarn; shorten River's CompletedJobRetentionPeriod (riverslot does not need it: its ledger keeps cycles unique) or see docs/scale.md",
		slog.String("task", spec.Name), slog.Int64("accounts_estimate", int64(estimate)),
		slog.Duration("completed_retention", retention), slog.Int64("river_job_rows", rows), slog.Int64("warn_above", RowBudgetWarn))
	return nil
}

// FetchRatePerWorker is how many jobs a second one worker slot of a River
// queue can start at most, however short the jobs: a producer fetches at
// most its free workers per fetch, and waits River's 100 ms fetch cooldown
// between fetches. A queue of MaxWorkers starts at most MaxWorkers x 10
// jobs a second (fewer when jobs take longer than the cooldown).
const FetchRatePerWorker = 10

// MaxWorkersFor returns the MaxWorkers that lets one node's sync queue start
// accounts syncs every cycle at no more than 70% of what River allows it: a
// River queue fetches at most MaxWorkers jobs per 100 ms fetch cooldown, so
// it starts at most MaxWorkers x FetchRatePerWorker jobs a second, however
// short the jobs (fewer when they take longer than the cooldown). Split it
// over the nodes of a cluster; add the accounts of every task that shares
// the queue. At least 1.
func MaxWorkersFor(accounts int64, cycle time.Duration) int {
	if accounts <= 0 || cycle <= 0 {
		return 1
	}
	need := float64(accounts) / cycle.Seconds()
	return max(1, int(math.Ceil(need/(0.7*FetchRatePerWorker))))
}

// checkStartRate warns when the task's sync queue, as this client works
// it (MaxWorkers of river.Config.Queues), cannot start the cycle's syncs
// as fast as the cycle asks: accounts / Cycle on average (a node; a
// cluster of N nodes has N times the workers), for calendar months
// accounts / 28 days (February's rate, the highest).
func (s *Scheduler) checkStartRate(ctx context.Context, spec *taskspec.Spec, info TaskInfo, accounts int64) {
	workers, ok := s.queueWorkers[spec.SyncOpts.Queue]
	if !ok || workers <= 0 || accounts <= 0 {
		return
	}
	cycle, _, _ := estimateCycle(info.Plan, info.Month)
	need := float64(accounts) / cycle.Seconds()
	capacity := float64(workers * FetchRatePerWorker)
	if need <= 0.7*capacity {
		return
	}
	s.log().WarnContext(ctx, "riverslot: the task's sync queue cannot start its syncs as fast as the cycle asks on one node: a River queue starts at most MaxWorkers x 10 jobs a second (it fetches at most MaxWorkers per 100 ms fetch cooldown), fewer with longer syncs; raise MaxWorkers, lengthen Cycle, or run more nodes (see docs/simulate.md)",
		slog.String("task", spec.Name), slog.String("queue", spec.SyncOpts.Queue), slog.Int("max_workers", workers),
		slog.Int64("accounts_estimate", accounts), slog.Float64("syncs_per_second_needed", math.Round(need)),
		slog.Int("starts_per_second_at_most", int(capacity)), slog.Int("max_workers_suggested", MaxWorkersFor(accounts, cycle)))
}
