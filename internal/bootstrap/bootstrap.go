package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/pinning"
	"github.com/riverslot/riverslot/internal/taskspec"
)

// Kind is the River job kind of bootstrap jobs. Tasks share it; the args carry
// the task name.
const Kind = "riverslot_bootstrap"

// Args are the arguments of a bootstrap job. One exists per (task, cycle
// start, plan): it is unique by its args in every state.
type Args struct {
	Task       string    `json:"task"`
	CycleStart time.Time `json:"cycle_start"`
	// Plan identifies the slot plan the cycle is made for (cycle, slots,
	// seed and shift), written as its plan id. A bootstrap made under
	// another plan is cancelled, not run.
	Plan taskspec.PlanKey `json:"plan"`
}

// Kind returns Kind.
func (Args) Kind() string { return Kind }

// NewArgs returns the bootstrap args of spec's cycle starting at cycleStart
// (normalized to UTC so that the unique key does not depend on the caller's
// location).
func NewArgs(spec *taskspec.Spec, cycleStart time.Time) Args {
	return Args{Task: spec.Name, CycleStart: cycleStart.UTC(), Plan: spec.Key}
}

// perSlotParams returns the insert params of the per-slot jobs of the
// cycle's slots, following pins (nil: hash placement): each runs Lead
// before its slot and is unique by args in every state (while River keeps
// it; the ledger decides beyond that).
func perSlotParams(spec *taskspec.Spec, cycleStart time.Time, slots []int, pins *taskspec.PinsRef) []river.InsertManyParams {
	cycleStart = cycleStart.UTC()
	params := make([]river.InsertManyParams, len(slots))
	for i, slot := range slots {
		args := perslot.NewArgs(spec, cycleStart, slot)
		args.Placement, args.Pins = perslot.PlacementHash, nil
		if pins != nil {
			args.Placement, args.Pins = perslot.PlacementPinned, pins
		}
		params[i] = river.InsertManyParams{
			Args: args,
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
	shard  string // the shard this River database is, for sharded tasks
}

// SetShard names the shard this worker's River database is: a sharded
// task's cycles get the slots the shard map gives it.
func (w *Worker) SetShard(name string) { w.shard = name }

// NewWorker returns a bootstrap worker. riverslot builds it.
func NewWorker(pool *pgxpool.Pool, logger *slog.Logger) *Worker {
	return &Worker{logger: logger, pool: pool, specs: make(map[string]*taskspec.Spec)}
}

// AddTask makes the worker serve the task of spec.
func (w *Worker) AddTask(spec *taskspec.Spec) { w.specs[spec.Name] = spec }

// Timeout returns the bootstrap's timeout: the task's BootstrapTimeout
// (a weighted cycle's pin computation has PinsTimeout of it), else River's
// default.
func (w *Worker) Timeout(job *river.Job[Args]) time.Duration {
	if spec, ok := w.specs[job.Args.Task]; ok {
		return spec.BootstrapTimeout
	}
	return 0
}

// Output is recorded as the bootstrap job's output: the cycle's placement.
type Output struct {
	// Placement is perslot.PlacementHash or perslot.PlacementPinned.
	Placement string `json:"placement"`
	// Pins names the pins the cycle follows (nil: hash placement).
	Pins *taskspec.PinsRef `json:"pins,omitempty"`
	// Pinned counts the accounts pinned by this cycle's own computation.
	Pinned int `json:"pinned,omitempty"`
	// Fallback is set when the cycle's pins were not computed within the
	// task's PinsTimeout: "previous" (Pins names the cycle followed) or
	// "hash".
	Fallback string `json:"fallback,omitempty"`
}

// Register adds the worker to workers.
func (w *Worker) Register(workers *river.Workers) error {
	return river.AddWorkerSafely(workers, river.Worker[Args](w))
}

// Work inserts the cycle's per-slot jobs and completes the bootstrap job in
// one transaction; for a weighted task it first pins the cycle's jumbo
// accounts in the same transaction (see pinning.Place). The ledger decides
// in that transaction: a cycle it records as bootstrapped already (a
// duplicate trigger, a re-run, an EnqueueCycle after River deleted the
// cycle's jobs) inserts nothing, and only the slots it has no row for get
// a per-slot job. A cycle older than ledger.Oldest is cancelled: its rows
// may have been pruned.
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
			slog.String("job_plan", job.Args.Plan.String()), slog.String("node_plan", w.specs[job.Args.Task].PlanID), slog.Int64("job_id", job.ID))
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}

	cycleStart := job.Args.CycleStart.UTC()
	if oldest := ledger.Oldest(spec.Plan.Cycle); time.Since(cycleStart) > oldest {
		return river.JobCancel(fmt.Errorf("cycle %s of task %q started more than %s ago (the ledger's horizon, 4 cycles + 1 h, less a cycle): it is too old to bootstrap",
			cycleStart.Format(time.RFC3339), spec.Name, oldest))
	}

	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("error starting bootstrap transaction: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit

	led := ledger.New(client.Schema())
	// The task's first cycle, already started: Task.FirstCycle decides.
	var first bool
	if started := time.Since(cycleStart); started > spec.LateGrace {
		earlier, err := led.HasCycleBefore(ctx, tx, spec.Name, cycleStart)
		if err != nil {
			return err
		}
		if !earlier {
			if done, err := w.firstCycle(ctx, tx, spec, job, cycleStart, started); done || err != nil {
				return err
			}
			first = spec.FirstCycle == taskspec.FirstCycleAll
		}
	}
	claimed, err := led.ClaimBootstrap(ctx, tx, spec.Name, spec.PlanID, cycleStart, job.ID)
	if err != nil {
		return err
	}
	if !claimed {
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("error completing bootstrap job: %w", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("error committing bootstrap job: %w", err)
		}
		w.logger.InfoContext(ctx, "riverslot: cycle already bootstrapped (the ledger records it); this bootstrap job adds nothing",
			slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.String("plan", spec.PlanID), slog.Int64("job_id", job.ID))
		return nil
	}

	// The cycle's placement is decided here, once, and recorded in every
	// per-slot job (perslot.NewArgs): its own pins for a weighted task, the
	// pins of the task it is OppositeOf when that one is weighted (computed
	// here if its own bootstrap has not yet: Place runs once per cycle).
	// A computation longer than PinsTimeout makes the cycle fall back to
	// the latest pins computed before it, else to hash placement (see
	// pinning.Place): the cycle is never lost.
	var (
		pins        pinning.Outcome
		owner       = spec
		ref         = spec.PinsRef()
		unreachable bool // the accounts database was: logged where decided
	)
	if spec.PinsFrom != nil {
		owner = spec.PinsFrom
	}
	if ref != nil {
		pins, err = place(ctx, tx, w.pool, owner, client.Schema(), job.Args.CycleStart)
		switch {
		case err != nil && owner.SeparateAccounts() && taskspec.Unreachable(err):
			// The accounts database (where the weights and pins live) is
			// unreachable: the cycle falls back to hash placement, as on a
			// PinsTimeout with no earlier pins, and is not lost. Its
			// per-slot jobs wait for the database (see perslot).
			w.logger.WarnContext(ctx, "riverslot: the accounts database is unreachable, so the cycle's pins cannot be computed or read; the cycle places every account by hash (its per-slot jobs wait for the database)",
				slog.String("task", spec.Name), slog.String("pins_task", owner.Name), slog.Time("cycle_start", cycleStart), slog.String("error", err.Error()))
			pins, unreachable = pinning.Outcome{Fallback: pinning.FallbackHash, Direct: true}, true
		case err != nil:
			return err
		}
		ref = pins.Ref(ref)
		// Above DirectMax accounts the weight census of the next cycle is
		// taken ahead, by a census job, so that its bootstrap computes pins
		// without scanning the fleet; a census this bootstrap left
		// unfinished is carried on instead (the next cycle uses it: it is
		// at most two cycles old). A smaller fleet's pins are computed
		// directly and need none.
		if !pins.Direct {
			census := owner.Schedule.Next(cycleStart)
			if pins.CensusPending() {
				census = cycleStart
			}
			if _, err := client.InsertManyTx(ctx, tx, []river.InsertManyParams{censusParams(owner, census)}); err != nil {
				return fmt.Errorf("error inserting the weight census job of task %q: %w", owner.Name, err)
			}
		}
	}
	output := Output{Placement: perslot.PlacementHash, Pins: ref, Pinned: pins.Pinned, Fallback: pins.Fallback}
	if ref != nil {
		output.Placement = perslot.PlacementPinned
	}
	if err := river.RecordOutput(ctx, output); err != nil {
		return fmt.Errorf("error recording the bootstrap's output: %w", err)
	}
	owned, shardMap, err := w.shardSlots(ctx, tx, led, spec, cycleStart)
	if err != nil {
		return err
	}
	cycleEnd := spec.CycleEnd(cycleStart).UTC()
	if err := led.RecordCycle(ctx, tx, ledger.Cycle{
		Shard: shardMap.shard, ShardVersion: shardMap.version,
		Task: spec.Name, Plan: spec.Key, Start: cycleStart, End: cycleEnd,
		Deadline:  spec.SyncsUntil(cycleStart, cycleEnd).UTC(),
		KeepUntil: cycleStart.Add(ledger.Horizon(spec.Plan.Cycle)),
		Placement: output.Placement, Pins: ref, Fallback: pins.Fallback, First: first,
		LatePolicy: spec.LatePolicy, LateGrace: spec.LateGrace,
		TriggerOffset: spec.Schedule.Offset, Location: locationName(spec.Schedule.Location),
	}); err != nil {
		return err
	}
	var slots []int
	if owned != nil {
		slots, err = led.ClaimSlotList(ctx, tx, spec.Name, spec.PlanID, cycleStart, owned)
	} else {
		slots, err = led.ClaimSlots(ctx, tx, spec.Name, spec.PlanID, cycleStart, spec.Slots(cycleStart))
	}
	if err != nil {
		return err
	}
	var results []*rivertype.JobInsertResult
	if len(slots) > 0 {
		if results, err = client.InsertManyTx(ctx, tx, perSlotParams(spec, cycleStart, slots, ref)); err != nil {
			return fmt.Errorf("error inserting %d per-slot jobs of task %q: %w", len(slots), spec.Name, err)
		}
		ids := make([]int64, len(results))
		for i, r := range results {
			ids[i] = r.Job.ID
		}
		if err := led.SetJobs(ctx, tx, spec.Name, spec.PlanID, cycleStart, slots, ids); err != nil {
			return err
		}
	}
	pruned, err := led.Prune(ctx, tx, spec.Name, ledger.PruneCutoff(spec.Plan.Cycle, cycleStart, time.Now()), time.Now())
	if err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("error completing bootstrap job: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing per-slot jobs: %w", err)
	}

	if spec.PinsRef() != nil && !unreachable {
		pinning.Log(ctx, w.logger, owner, job.Args.CycleStart, pins)
	}
	if pins.Fallback != "" && pins.Reused && owner != spec {
		w.logger.WarnContext(ctx, "riverslot: the cycle follows the fallback placement of the task it is OppositeOf",
			slog.String("task", spec.Name), slog.String("pins_task", owner.Name), slog.Time("cycle_start", job.Args.CycleStart),
			slog.String("fallback", pins.Fallback), slog.Time("follows", pins.Follows))
	}
	inserted := 0
	for _, r := range results {
		if !r.UniqueSkippedAsDuplicate {
			inserted++
		}
	}
	served := spec.Slots(cycleStart)
	attrs := []any{slog.String("task", spec.Name), slog.Time("cycle_start", job.Args.CycleStart),
		slog.Int("slots", served), slog.Duration("slot_duration", spec.SlotLen(cycleStart, 0))}
	if owned != nil {
		served = len(owned)
		attrs = append(attrs, slog.String("shard", shardMap.shard), slog.Int64("shard_map_version", shardMap.version), slog.Int("slots_of_shard", served))
	}
	w.logger.InfoContext(ctx, "riverslot: cycle bootstrapped", append(attrs,
		slog.Int("per_slot_inserted", inserted), slog.Int("per_slot_already_present", served-inserted),
		slog.Int64("ledger_rows_pruned", pruned))...)
	return nil
}

// cycleShard is the shard and shard-map version a cycle follows (zero for
// an unsharded task).
type cycleShard struct {
	shard   string
	version int64
}

// shardSlots returns, for a sharded task (one with a shard map in force at
// cycleStart in this database), the slots of the cycle that this shard
// serves, by the map, and the map's version; nil slots for an unsharded
// task (no map in this database, and a node that names no shard: every
// slot). A cycle with no map in force is refused (the job cancelled, the
// reason logged) when the task has maps here from a later cycle on, or
// when this node names a shard (Config.Shard): its slots have no shard,
// and serving every slot would sync twice what the other shards serve. A
// shard the map in force gives no bucket (one that joined the fleet ahead
// of its buckets, or one whose buckets all moved away) serves none of the
// cycle's slots: the cycle is recorded with none. It takes the task's
// shard-map lock shared in tx, so a change of the map waits for the
// cycle's commit and then sees it made.
func (w *Worker) shardSlots(ctx context.Context, tx pgx.Tx, led ledger.Ledger, spec *taskspec.Spec, cycleStart time.Time) ([]int, cycleShard, error) {
	if err := led.LockShards(ctx, tx, spec.Name, false); err != nil {
		return nil, cycleShard{}, err
	}
	m, ok, err := led.ShardMapAt(ctx, tx, spec.Name, cycleStart)
	if err != nil {
		return nil, cycleShard{}, err
	}
	if !ok {
		// No map in force at cycleStart. A task with no map at all in this
		// database, on a node that names no shard, is not sharded: every
		// slot. Otherwise the cycle has no map to tell its slots: serving
		// every slot would sync twice whatever another shard serves (a
		// shared accounts database, accounts copied ahead of a move), so
		// the bootstrap refuses, saying how to go on.
		_, sharded, err := led.LatestShardMap(ctx, tx, spec.Name)
		if err != nil {
			return nil, cycleShard{}, err
		}
		if !sharded && w.shard == "" {
			return nil, cycleShard{}, nil
		}
		err = fmt.Errorf("task %q: this database has a shard map for the task, but none in force at %s, so this cycle's slots have no shard; "+
			"set a map in force from this cycle (riverslot shards set, riverslot.SetShardMap with a zero from), then make the cycle again (Scheduler.EnqueueCycle), or let the next cycle under a map run",
			spec.Name, cycleStart.Format(time.RFC3339))
		if !sharded {
			err = fmt.Errorf("task %q: this node names shard %q (riverslot.Config.Shard, riverslot worker --shard), but this database holds no shard map of the task, so this cycle's slots have no shard: "+
				"serving every slot would sync twice what the other shards serve. A fleet's first map must exist before its first sharded cycle: set it on every shard "+
				"(riverslot shards set; riverslot.SetShardMap with a zero from; a task of one database only: a map giving every bucket to %q), then make the cycle again (Scheduler.EnqueueCycle), or let the next cycle run; "+
				"or, for a task that is not sharded, run its nodes without a shard",
				spec.Name, w.shard, w.shard)
		}
		w.logger.ErrorContext(ctx, "riverslot: "+err.Error(), slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.String("shard", w.shard))
		return nil, cycleShard{}, river.JobCancel(err)
	}
	shards := m.Shards()
	switch {
	case w.shard == "":
		return nil, cycleShard{}, fmt.Errorf("task %q is sharded (shard map version %d in this database, shards %v) but this node names no shard: set riverslot.Config.Shard (riverslot worker --shard) to this database's shard", spec.Name, m.Version, shards)
	case spec.Monthly():
		return nil, cycleShard{}, fmt.Errorf("task %q: a calendar-month task cannot be sharded (its days' bucket ranges change month by month); remove its shard map", spec.Name)
	case spec.PinsRef() != nil:
		return nil, cycleShard{}, fmt.Errorf("task %q: a weighted task (or one OppositeOf a weighted task) cannot be sharded (a pin may move an account to another shard's slot); remove its shard map or its Weight", spec.Name)
	}
	owned := m.SlotsOf(spec.Plan, spec.Shift, w.shard)
	if owned == nil {
		owned = []int{} // the shard serves no slot of this plan
	}
	if !slices.Contains(shards, w.shard) {
		// The database holds the map, so it is one of the fleet's shards:
		// one that joined ahead of its buckets, or whose buckets all moved
		// away. Its cycle is made with no slot, so that its status and
		// history show it (every slot elsewhere).
		attrs := []any{slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.String("shard", w.shard),
			slog.Int64("shard_map_version", m.Version), slog.Any("shards", shards)}
		latest, _, err := led.LatestShardMap(ctx, tx, spec.Name)
		if err != nil {
			return nil, cycleShard{}, err
		}
		if latest.Version != m.Version && slices.Contains(latest.Shards(), w.shard) {
			w.logger.InfoContext(ctx, "riverslot: this shard owns no bucket in the shard map in force; the cycle is made with none of its slots, and a later map gives it buckets",
				append(attrs, slog.Int64("next_shard_map_version", latest.Version), slog.Time("next_effective_from", latest.EffectiveFrom))...)
		} else {
			w.logger.WarnContext(ctx, "riverslot: this node's shard owns no bucket in the shard map in force; the cycle is made with none of its slots. "+
				"If this database is another shard, set riverslot.Config.Shard to its name; a new shard gets buckets with riverslot shards move", attrs...)
		}
	}
	if err := m.Aligned(spec.Plan); err != nil {
		w.logger.WarnContext(ctx, "riverslot: the shard map does not fall on the plan's slots; each slot is served by the shard owning its first bucket, so some accounts are served by a shard that does not own them",
			slog.String("task", spec.Name), slog.Int64("shard_map_version", m.Version), slog.String("error", err.Error()))
	}
	return owned, cycleShard{shard: w.shard, version: m.Version}, nil
}

// firstCycle says, at warn, what the task's first cycle does, started
// started ago (the app was deployed mid-cycle), under Task.FirstCycle; under
// FirstCycleNext it completes the bootstrap job in tx without making the
// cycle, and returns true.
func (w *Worker) firstCycle(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, job *river.Job[Args], cycleStart time.Time, started time.Duration) (bool, error) {
	next := spec.Schedule.Next(cycleStart)
	slots, past := spec.Slots(cycleStart), 0
	for now := cycleStart.Add(started); past < slots && !spec.SlotStart(cycleStart, past).After(now); past++ {
	}
	attrs := []any{slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.Duration("started_ago", started.Round(time.Second)),
		slog.Int("slots_past", past), slog.Int("slots", slots), slog.Time("next_cycle_start", next), slog.String("first_cycle", string(spec.FirstCycle))}
	switch spec.FirstCycle {
	case taskspec.FirstCycleNext:
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return true, fmt.Errorf("error completing bootstrap job: %w", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return true, fmt.Errorf("error committing bootstrap job: %w", err)
		}
		w.logger.WarnContext(ctx, "riverslot: the task's first cycle started before the app did; FirstCycleNext: it starts at the next cycle, and syncs nobody until then", attrs...)
		return true, nil
	case taskspec.FirstCycleAll:
		if spec.Opposed {
			w.logger.WarnContext(ctx, "riverslot: the task's first cycle started before the app did; FirstCycleAll, but the task is of an OppositeOf pair: a past slot's accounts are spread only within their own slot, the others skipped until the next cycle (the pair's distance comes first)", attrs...)
			break
		}
		w.logger.WarnContext(ctx, "riverslot: the task's first cycle started before the app did; FirstCycleAll: the accounts of its past slots are spread over the rest of the cycle, so every account is synced in it (their next regular sync may come less than half a cycle later)", attrs...)
	default:
		w.logger.WarnContext(ctx, "riverslot: the task's first cycle started before the app did; FirstCycleLate: the accounts of its past slots are spread within half a cycle of their slot, or skipped until the next cycle under LatePolicy; set Task.FirstCycle to FirstCycleAll to sync every account in this cycle, or FirstCycleNext to start at the next", attrs...)
	}
	return false, nil
}

// place computes the pins of owner's cycle (pinning.Place) and prunes old
// ones, in riverTx when the accounts live in River's database. Otherwise
// the pins tables live next to the accounts: they are computed and
// committed there first, in a transaction of their own; a bootstrap that
// dies before its River transaction commits is retried and reuses them
// (Place runs once per cycle), so the per-slot jobs it then inserts name
// pins that exist. Census steps Place takes itself run in transactions of
// their own on the accounts' database (riverPool when it is River's).
func place(ctx context.Context, riverTx pgx.Tx, riverPool *pgxpool.Pool, owner *taskspec.Spec, riverSchema string, cycleStart time.Time) (pinning.Outcome, error) {
	tx := riverTx
	if owner.SeparateAccounts() {
		var err error
		if tx, err = owner.AccountsPool.Begin(ctx); err != nil {
			return pinning.Outcome{}, fmt.Errorf("error starting the pins transaction on the accounts database of task %q: %w", owner.Name, err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	}
	pins, err := pinning.Place(ctx, tx, owner.AccountsDB(riverPool), owner, cycleStart)
	if err != nil {
		return pinning.Outcome{}, fmt.Errorf("error placing the jumbo accounts of task %q: %w", owner.Name, err)
	}
	if _, err := pinning.Prune(ctx, tx, riverTx, owner, riverSchema, cycleStart); err != nil {
		return pinning.Outcome{}, fmt.Errorf("task %q: %w", owner.Name, err)
	}
	if tx != riverTx {
		if err := tx.Commit(ctx); err != nil {
			return pinning.Outcome{}, fmt.Errorf("error committing the pins of task %q: %w", owner.Name, err)
		}
	}
	return pins, nil
}

// locationName is the name of the schedule's zone the ledger records, ""
// for an absolute UTC grid (no Location).
func locationName(loc *time.Location) string {
	if loc == nil {
		return ""
	}
	return loc.String()
}
