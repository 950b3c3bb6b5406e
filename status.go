package riverslot

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/upstream"
	"github.com/riverslot/riverslot/sqlbucket"
)

// Slot fan-out states in SlotStatus.State.
const (
	SlotScheduled = "scheduled" // the per-slot job waits for its time
	SlotRunning   = "running"   // fanning out (or retrying after an error)
	SlotDone      = "done"      // every account of the slot enqueued (or skipped as late)
	SlotFailed    = "failed"    // discarded or cancelled: see Error
	SlotMissing   = "missing"   // no per-slot job: the bootstrap has not run, or River deleted it
	SlotElsewhere = "elsewhere" // another shard's slot: that shard's database makes and serves it
)

// TaskStatus is where a task's cycles stand: the current one and the one
// before it.
type TaskStatus struct {
	Task     string       // the task's Name
	Current  *CycleStatus // the latest cycle the ledger records (Status errs when there is none)
	Previous *CycleStatus // nil when the task has no earlier cycle
	// Census is the latest weight census of a weighted task (nil for
	// another task, or before its first census).
	Census *CensusStatus
	// Upstreams sums up the task's upstreams (nil for a task without
	// Upstream or Limits, or before its first sync).
	Upstreams *UpstreamsStatus
}

// UpstreamsStatus is a task's upstreams at a glance.
type UpstreamsStatus struct {
	// Keys is how many upstreams synced or were given limits; NotClosed
	// how many have a breaker open or half-open.
	Keys, NotClosed int
	// Top are the UpstreamsTop that most need a look: breaker not closed
	// first, then paused (a 429), then by syncs skipped, then by syncs
	// throttled. The whole list: Scheduler.Upstreams.
	Top []UpstreamStatus
}

// UpstreamsTop is how many upstreams Status shows.
const UpstreamsTop = 10

// UpstreamStatus is one upstream with the limits in force: an operator's
// override, else the task's Limits (0: none).
type UpstreamStatus struct {
	UpstreamState
	RateLimit        float64
	ConcurrencyLimit int
}

// upstreams reads the task's upstreams (nil for a task without limits).
func (s *Scheduler) upstreams(ctx context.Context, spec *taskspec.Spec) (*UpstreamsStatus, error) {
	if !spec.Limited() {
		return nil, nil
	}
	keys, notClosed, top, err := upstream.New(s.riverSchema).Summary(ctx, s.pool, spec.Name, UpstreamsTop)
	switch {
	case errors.Is(err, upstream.ErrMissing):
		return nil, nil // Check reports the missing tables
	case err != nil:
		return nil, err
	case keys == 0:
		return nil, nil
	}
	out := &UpstreamsStatus{Keys: keys, NotClosed: notClosed}
	for _, st := range top {
		u := UpstreamStatus{UpstreamState: st, RateLimit: spec.Limits.Rate, ConcurrencyLimit: spec.Limits.Concurrency}
		if st.Rate != nil {
			u.RateLimit = *st.Rate
		}
		if st.Concurrency != nil {
			u.ConcurrencyLimit = *st.Concurrency
		}
		out.Top = append(out.Top, u)
	}
	return out, nil
}

// CensusStatus is where a weighted task's latest weight census stands.
type CensusStatus struct {
	CycleStart time.Time // the cycle whose pins it is for
	Steps      int       // steps taken
	NextBucket int       // the next bucket to count
	Finished   bool
	// Stalls is how many census attempts in a row took no step (each ran
	// out of time: a lock on the accounts table, a slow database), since
	// StalledSince; the census job backs off between them. 0 when the
	// last attempt made progress.
	Stalls       int
	StalledSince time.Time
}

// census reads the latest weight census of spec's task (nil when spec is
// not weighted or has none).
func (s *Scheduler) census(ctx context.Context, spec *taskspec.Spec) (*CensusStatus, error) {
	if !spec.Weighted() {
		return nil, nil
	}
	var (
		c     CensusStatus
		since *time.Time
	)
	err := spec.AccountsDB(s.pool).QueryRow(ctx, spec.Pins.CensusState, spec.Name, spec.PlanID).
		Scan(&c.CycleStart, &c.Steps, &c.NextBucket, &c.Finished, &c.Stalls, &since)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703") {
			return nil, nil // no census table (yet) of this version: CreateIndexes makes it; Check says so
		}
		return nil, fmt.Errorf("error reading the weight census of task %q: %w", spec.Name, err)
	}
	c.CycleStart = c.CycleStart.UTC()
	if since != nil {
		c.StalledSince = since.UTC()
	}
	return &c, nil
}

// CycleStatus is one cycle of one task, read from River's job table and the
// accounts table.
type CycleStatus struct {
	CycleStart time.Time // when the cycle starts (slot 0's start)
	Slots      int       // slots in the cycle, gcd(cycle seconds, 256)
	// Plan is the plan id the cycle runs under, as its jobs carry it (see
	// TaskInfo.PlanID): the task's own, or the one its latest cycle was
	// made under when that differs (a task OppositeOf another described
	// without it, as riverslot status does; a change of Cycle or Seed).
	Plan string
	// Placement is the cycle's placement as its bootstrap recorded it in
	// the per-slot jobs: PlacementHash or PlacementPinned. PinsTask is the
	// task whose pins a pinned cycle follows (the task itself, or the
	// weighted task it is OppositeOf), PinsShift the slots those pins are
	// shifted by (half the slots for an OppositeOf task).
	Placement string
	PinsTask  string
	PinsShift int
	// PinsFallback is set when the cycle's bootstrap could not compute its
	// pins in time (Task.PinsTimeout) and fell back: "previous" (the
	// latest pins computed before) or "hash" (hash placement), as its
	// ledger row records it; "" when it computed them.
	PinsFallback string
	// PerSlot has one entry per slot, in slot order.
	PerSlot []SlotStatus

	// SlotsDone and SlotsFailed count the slots in state SlotDone and
	// SlotFailed.
	SlotsDone, SlotsFailed int
	// Shard and ShardVersion are, for a sharded task, this database's
	// shard and the version of the shard map the cycle follows; the
	// SlotsElsewhere slots the map gives other shards are in state
	// SlotElsewhere, expect no account here, and are never behind.
	Shard          string
	ShardVersion   int64
	SlotsElsewhere int

	// Sync jobs of the cycle: Enqueued is what the fan-outs inserted (their
	// cursors), Skipped the late accounts they skipped. Pending (scheduled
	// or available), Running and Retryable are River's unfinished jobs.
	// The rest is how the cycle's sync jobs ended, as the nodes that ran
	// them counted them in the cycle's ledger row (so it stays after River
	// deletes the jobs; a node killed loses at most half a second of its
	// counts): Completed ended without error (Synced called Sync, Gone
	// found the account gone or filtered out, SkippedStale started past
	// its NotAfter, less than half a cycle before the account's next
	// regular sync, SkippedUpstream found no room with its upstream before
	// its NotAfter), Discarded failed its last attempt, Cancelled was
	// cancelled.
	Enqueued, Skipped               int64
	Pending, Running, Retryable     int64
	Completed, Discarded, Cancelled int64
	Synced, Gone                    int64
	AccountsExpected                int64 // the sum of the slots' Expected
	SkippedStale, SkippedUpstream   int64
	// LatenessP50 and LatenessP99 are percentiles of the start minus the
	// scheduled time of the cycle's synced syncs, from the ledger's
	// histogram (buckets 26% wide, interpolated); LatenessSample is how
	// many syncs it counts, LatenessKnown false when none (the percentiles
	// are then unknown, not zero).
	LatenessP50, LatenessP99 time.Duration
	LatenessSample           int64
	LatenessKnown            bool
	NextSlot                 int       // -1 when every slot has started
	NextSlotAt               time.Time // when NextSlot starts
	Verdict                  string    // "on track", "starting: ...", "behind by N slots", "failed slot K: error" or "slot K selected N accounts, M expected (...)"
	OnTrack                  bool      // the verdict is "on track"
	BehindSlots              int       // slots past their middle whose fan-out has not finished
	// Starting is set, with the verdict "starting: ...", instead of
	// "behind by N slots" while River is starting and the behind slots'
	// per-slot jobs are due (none missing, retrying or scheduled later):
	// River's leader (which promotes scheduled jobs) was elected less than
	// StartingGrace ago, or there is no leader yet and every behind slot
	// passed its middle less than StartingGrace ago. A health check should treat it as on track
	// (riverslot status exits 0); past StartingGrace it is "behind" again.
	Starting bool
	// OffSlots counts the done slots whose fan-out selected (enqueued plus
	// skipped as late) a number of accounts other than Expected, by more
	// than max(10, Expected / 10): accounts added or removed since the
	// fan-out on a large scale, or a placement status does not explain.
	// OffSlot is the first of them, -1 when none.
	OffSlots    int
	OffSlot     int
	FailedSlot  int    // -1 when none failed
	FailedError string // River's last error of FailedSlot's per-slot job
	// WaitingError is why a slot not finished waits, as its fan-out
	// recorded it in the ledger (the accounts database unreachable); ""
	// when none does.
	WaitingError string
	// AccountsError is set when Status could not reach the accounts
	// database to count the accounts expected per slot (or those the
	// cycle's pins move): it says so, and the expected accounts are then
	// what the fan-outs selected.
	AccountsError string
}

// Placements of a cycle in CycleStatus.Placement.
const (
	// PlacementHash: every account in its hash slot.
	PlacementHash = perslot.PlacementHash
	// PlacementPinned: the accounts pinned in the cycle (Task.Weight) in
	// their pinned slots, every other account in its hash slot.
	PlacementPinned = perslot.PlacementPinned
)

// SlotStatus is one slot's fan-out.
type SlotStatus struct {
	Slot     int       // 0 to Slots-1
	Start    time.Time // when the slot starts; its per-slot job runs Lead before
	State    string    // SlotScheduled, SlotRunning, SlotDone, SlotFailed or SlotMissing
	Attempts int       // the per-slot job's attempts so far (River's attempt count)
	// Enqueued and Skipped are the accounts the fan-out enqueued and
	// skipped as late so far; Batches the transactions it committed.
	Enqueued, Skipped int64
	Batches           int
	// Expected is the accounts the slot selects today under the cycle's
	// placement: those of its hash slot that are not pinned in the cycle
	// (PinnedOut are), plus those pinned to it (PinnedIn), from the pins its
	// cycle's per-slot jobs name. PinnedIn and PinnedOut count only accounts
	// that still exist and match the task's filter.
	Expected            int64
	PinnedIn, PinnedOut int64
	// Error is River's last recorded error of a failed or retrying slot
	// (the ledger's, once River deleted the job).
	Error string

	jobID int64 // the per-slot job the ledger records
}

// slotJob is what River's job table still says of a per-slot job.
type slotJob struct {
	state, err string
	attempt    int
}

// slotJobs reads the per-slot jobs of ids still in River's job table, by
// primary key: their state, attempt and last error.
func (s *Scheduler) slotJobs(ctx context.Context, ids []int64) (map[int64]slotJob, error) {
	out := make(map[int64]slotJob, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, "SELECT id, state::text, attempt, errors FROM "+sqlbucket.QualifiedTable(s.riverSchema, "river_job")+" WHERE id = ANY($1)", ids)
	if err != nil {
		return nil, fmt.Errorf("error reading the cycle's unfinished per-slot jobs: %w", err)
	}
	var (
		id   int64
		j    slotJob
		errs []json.RawMessage
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &j.state, &j.attempt, &errs}, func() error {
		j.err = ""
		if len(errs) > 0 {
			var last struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(errs[len(errs)-1], &last) == nil {
				j.err = last.Error
			}
		}
		out[id] = j
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error reading the cycle's unfinished per-slot jobs: %w", err)
	}
	return out, nil
}

// Status returns where the named task's current cycle (the latest in
// riverslot's ledger) and the one before it stand. The cycle is found under
// any plan and shown under the plan its bootstrap recorded
// (CycleStatus.Plan), with the placement it recorded: a task OppositeOf
// another is found even by a tool that describes it alone, and a pinned
// cycle's accounts are expected in their pinned slots. Everything about
// the cycle comes from its ledger rows, read by key: what its bootstrap
// decided, each slot's state and fan-out figures, and how its sync jobs
// ended (counted there by the nodes that ran them, with a lateness
// histogram), so nothing is lost when River deletes finished jobs. River's
// job table is read only for what is still queued or running: the per-slot
// jobs of slots not finished (by id) and the cycle's unfinished sync jobs
// (through River's fetching index; slot scheduling keeps them few). The
// accounts expected per slot come from the ledger too: what each slot's
// fan-out of an earlier cycle counted in its bucket range; only the task's
// first cycle under its plan counts the accounts table (through the bucket
// index, at most once a minute). Those the cycle's pins move (one
// bucket-index lookup per pin) are counted at most once a minute per task
// and cycle.
func (s *Scheduler) Status(ctx context.Context, taskName string) (*TaskStatus, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	if !s.configured {
		return nil, errNoRiverSchema
	}
	latest, plan, found, err := s.ledger().LatestCycle(ctx, s.pool, spec.Name, spec.PlanID)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, &noCycleError{msg: fmt.Sprintf("task %q has no cycle yet: riverslot's ledger records no bootstrapped cycle of the task (under its plan %s or any other)", spec.Name, spec.PlanID)}
	}
	latest = latest.UTC()
	if spec, err = planSpec(spec, plan, latest); err != nil {
		return nil, err
	}
	return s.statusAt(ctx, spec, latest)
}

// StatusAt is Status for the cycle starting at cycleStart, under the plan
// its jobs carry (the task's own when it has jobs under it or none at all).
func (s *Scheduler) StatusAt(ctx context.Context, taskName string, cycleStart time.Time) (*TaskStatus, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	if !s.configured {
		return nil, errNoRiverSchema
	}
	cycleStart = cycleStart.UTC()
	plan, ok, err := s.cyclePlanFromLedger(ctx, spec, cycleStart)
	if err != nil {
		return nil, err
	}
	if !ok {
		// No ledger row of the cycle: it must be a cycle start of the
		// task as configured (a cycle not bootstrapped yet).
		if start := spec.Schedule.Start(cycleStart); !start.Equal(cycleStart) {
			return nil, &noCycleError{msg: fmt.Sprintf("cycleStart %s is not a cycle start of task %q and the ledger records no cycle of the task starting then; the cycle containing it starts at %s",
				cycleStart.Format(time.RFC3339), taskName, start.UTC().Format(time.RFC3339))}
		}
		plan = spec.Key
	}
	if spec, err = planSpec(spec, plan, cycleStart); err != nil {
		return nil, err
	}
	return s.statusAt(ctx, spec, cycleStart)
}

// statusFromJobs is Status (StatusAt when cycleStart is not zero) that
// never counts the accounts table, so its cost does not grow with the
// fleet: expected accounts per slot come from the ledger (what each slot's
// fan-out of an earlier cycle counted) when it has every slot, else from
// what the cycle's per-slot jobs carry (see jobsExpected). Handler uses it
// on every page view.
func (s *Scheduler) statusFromJobs(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time) (*TaskStatus, error) {
	if !s.configured {
		return nil, errNoRiverSchema
	}
	var (
		err   error
		plan  taskspec.PlanKey
		found bool
	)
	if cycleStart.IsZero() {
		if cycleStart, plan, found, err = s.ledger().LatestCycle(ctx, s.pool, spec.Name, spec.PlanID); err != nil {
			return nil, err
		}
		if !found {
			return nil, &noCycleError{msg: fmt.Sprintf("task %q has no cycle yet: riverslot's ledger records no bootstrapped cycle of the task (under its plan %s or any other)", spec.Name, spec.PlanID)}
		}
	} else {
		if plan, found, err = s.cyclePlanFromLedger(ctx, spec, cycleStart); err != nil {
			return nil, err
		}
		if !found {
			return nil, &noCycleError{msg: fmt.Sprintf("task %q has no ledger row with cycle start %s; /api/cycles lists the cycles it has",
				spec.Name, cycleStart.UTC().Format(time.RFC3339))}
		}
	}
	cycleStart = cycleStart.UTC()
	if spec, err = planSpec(spec, plan, cycleStart); err != nil {
		return nil, err
	}
	counts, complete, err := s.ledger().RangeCounts(ctx, s.pool, spec.Name, spec.PlanID, spec.Slots(cycleStart), cycleStart)
	if err != nil {
		return nil, err
	}
	if !complete || spec.Monthly() { // a month's days are not the last month's
		counts = nil
	}
	return s.statusOf(ctx, spec, cycleStart, counts)
}

// ErrNoCycle is wrapped by the errors of Status and StatusAt when the task
// has no such cycle: none yet, or no job of the asked cycle start and that
// start is not on the task's grid.
var ErrNoCycle = errors.New("no such cycle")

// noCycleError: the task has no cycle yet, or no job of the asked cycle.
type noCycleError struct{ msg string }

func (e *noCycleError) Error() string { return e.msg }
func (e *noCycleError) Unwrap() error { return ErrNoCycle }

// planSpec returns the spec the task's cycle at cycleStart runs under when
// it was made for plan (taskspec.Spec.ForPlan, as the per-slot worker
// does), keeping the task's schedule when the plan has its cycle (a
// wall-clock schedule's DST days).
func planSpec(spec *taskspec.Spec, plan taskspec.PlanKey, cycleStart time.Time) (*taskspec.Spec, error) {
	other, err := spec.ForPlan(plan, cycleStart)
	if err != nil {
		return nil, fmt.Errorf("task %q: its cycle %s was made under plan %q, which this version cannot run: %w",
			spec.Name, cycleStart.Format(time.RFC3339), plan, err)
	}
	if other != spec && !other.Monthly() && !spec.Monthly() && other.Plan.Cycle == spec.Plan.Cycle && spec.Schedule.Start(cycleStart).Equal(cycleStart) {
		other.Schedule = spec.Schedule
	}
	return other, nil
}

func (s *Scheduler) statusAt(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time) (*TaskStatus, error) {
	counts, err := s.expectedCounts(ctx, spec, cycleStart)
	var unreachable error
	if err != nil {
		if !taskspec.Unreachable(err) {
			return nil, err
		}
		// The accounts database is down while River's is not: Status
		// still answers, expecting what the fan-outs selected.
		counts, unreachable = nil, err
	}
	st, err := s.statusOf(ctx, spec, cycleStart, counts)
	if err != nil {
		return nil, err
	}
	if unreachable != nil {
		for _, c := range []*CycleStatus{st.Current, st.Previous} {
			if c != nil && c.AccountsError == "" {
				c.AccountsError = accountsErrorText(unreachable)
			}
		}
	}
	return st, nil
}

// accountsErrorText says why a status expects what the fan-outs selected.
func accountsErrorText(err error) string {
	return "the accounts database did not answer (" + err.Error() + "): the accounts expected per slot are what the fan-outs selected"
}

// statusOf reads the cycle at cycleStart and the one before it. counts are
// the accounts per hash slot; nil means the expected accounts come from
// the jobs alone (jobsExpected).
func (s *Scheduler) statusOf(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time, counts []int64) (*TaskStatus, error) {
	now := time.Now()
	prevStart := cycleStart.Add(-spec.Plan.Cycle) // on a wall-clock schedule, the previous start of the grid
	if spec.Schedule.Location != nil {
		prevStart = spec.Schedule.Start(cycleStart.Add(-time.Nanosecond)).UTC()
	}
	prevCounts := counts
	if spec.Monthly() && counts != nil {
		// The last month has days of its own.
		var err error
		if prevCounts, err = s.hashCounts(ctx, spec, prevStart); err != nil {
			prevCounts = nil // expected from its jobs, as when the accounts database is down
		}
	}
	prev, err := s.cycleStatus(ctx, spec, prevStart, prevCounts, now)
	if err != nil {
		return nil, err
	}
	if prevCounts == nil {
		jobsExpected(prev, nil)
	}
	current, err := s.cycleStatus(ctx, spec, cycleStart, counts, now)
	if err != nil {
		return nil, err
	}
	if counts == nil {
		jobsExpected(current, prev)
	}
	if err := s.checkStarting(ctx, spec, current, now); err != nil {
		return nil, err
	}
	st := &TaskStatus{Task: spec.Name, Current: current}
	if st.Census, err = s.census(ctx, spec); err != nil {
		// The census lives next to the accounts: their database may be
		// down while River's is not. Status still answers.
		s.log().WarnContext(ctx, "riverslot: Status could not read the weight census", slog.String("task", spec.Name), slog.String("error", err.Error()))
		st.Census = nil
	}
	if st.Upstreams, err = s.upstreams(ctx, spec); err != nil {
		s.log().WarnContext(ctx, "riverslot: Status could not read the task's upstreams", slog.String("task", spec.Name), slog.String("error", err.Error()))
		st.Upstreams = nil
	}
	if prev.SlotsDone+prev.SlotsFailed > 0 || slices.ContainsFunc(prev.PerSlot, func(p SlotStatus) bool { return p.State != SlotMissing }) {
		st.Previous = prev
	}
	return st, nil
}

// jobsExpected sets the expected accounts of c's slots from what the jobs
// carry, without counting the accounts table: a slot whose fan-out ran
// expects what it selected (enqueued plus skipped as late), any other slot
// what the same slot selected in the previous cycle (prev, when its fan-out
// ran there; else 0). Pinned in and out are not counted; no slot is off.
func jobsExpected(c, prev *CycleStatus) {
	c.AccountsExpected = 0
	for i := range c.PerSlot {
		p := &c.PerSlot[i]
		p.Expected, p.PinnedIn, p.PinnedOut = 0, 0, 0
		switch {
		case p.State == SlotDone || p.Batches > 0:
			p.Expected = p.Enqueued + p.Skipped
		case prev != nil && i < len(prev.PerSlot):
			p.Expected = prev.PerSlot[i].Expected
		}
		c.AccountsExpected += p.Expected
	}
	if c.OffSlots > 0 {
		c.OffSlots, c.OffSlot = 0, -1
		if c.FailedSlot < 0 && c.BehindSlots == 0 {
			c.OnTrack, c.Verdict = true, "on track"
		}
	}
}

func (s *Scheduler) riverTable(*taskspec.Spec) string {
	return sqlbucket.QualifiedTable(s.riverSchema, "river_job")
}

// expectedTTL is how long Status reuses its count of the accounts per slot
// and of the accounts a cycle's pins move: counting a million accounts takes
// a few hundred milliseconds, and the counts move slowly.
const expectedTTL = time.Minute

type expectedCount struct {
	at     time.Time
	counts []int64
}

// cachedCounts returns the counts stored under key less than expectedTTL
// ago, else those of count, stored. Expired entries are dropped on the way,
// so the cache holds the few tasks and cycles of the last minute.
func (s *Scheduler) cachedCounts(key string, count func() ([]int64, error)) ([]int64, error) {
	s.expectedMu.Lock()
	cached, ok := s.expected[key]
	s.expectedMu.Unlock()
	if ok && time.Since(cached.at) < expectedTTL {
		return cached.counts, nil
	}
	counts, err := count()
	if err != nil {
		return nil, err
	}
	s.expectedMu.Lock()
	defer s.expectedMu.Unlock()
	if s.expected == nil {
		s.expected = make(map[string]expectedCount)
	}
	for k, c := range s.expected {
		if time.Since(c.at) >= expectedTTL {
			delete(s.expected, k)
		}
	}
	s.expected[key] = expectedCount{at: time.Now(), counts: counts}
	return counts, nil
}

// hashCounts counts the accounts of each hash slot (the bucket slot
// shifted by the plan's shift) of the cycle starting at cycleStart,
// through the bucket index, at most once per expectedTTL per task and
// plan (and month). A calendar month's day counts the buckets that start
// on it (a bucket on the boundary of two days counts whole on the first).
func (s *Scheduler) hashCounts(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time) ([]int64, error) {
	key, per := "hash\x00"+spec.Name+"\x00"+spec.PlanID, spec.Plan.BucketsPerSlot
	if spec.Monthly() {
		key, per = key+"\x00"+cycleStart.UTC().Format(time.RFC3339), 1
	}
	return s.cachedCounts(key, func() ([]int64, error) {
		rows, err := spec.AccountsDB(s.pool).Query(ctx, "SELECT "+spec.BucketExpr()+" / $1 AS bucket_slot, count(*) FROM "+spec.QualifiedTable+
			" WHERE true"+spec.FilterClause+" GROUP BY 1", per)
		if err != nil {
			return nil, fmt.Errorf("error counting accounts per slot: %w", err)
		}
		out := make([]int64, spec.Slots(cycleStart))
		var slot int
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&slot, &n}, func() error {
			if spec.Monthly() {
				out[spec.Month.BucketDay(cycleStart, slot)] += n
				return nil
			}
			out[spec.Plan.Shift(slot, spec.Shift)] = n
			return nil
		}); err != nil {
			return nil, fmt.Errorf("error counting accounts per slot: %w", err)
		}
		return out, nil
	})
}

// pinMovesSQL counts, by bucket and pinned slot, the accounts pinned in a
// cycle ($1 task, $2 plan, $3 cycle start) in the pins tables of schema that
// the task's filter still selects: each pin looked up by (bucket, id) in
// the bucket index in a subquery of its own (LIMIT 1 keeps it a lookup per
// pin, never a merge join along the whole index), as the per-slot job's
// pinned pages do, so the count costs one index lookup per pin and never
// scans the accounts table.
//
//	SELECT p.bucket, p.slot, count(*) FROM riverslot_pins p
//	CROSS JOIN LATERAL (SELECT 1 FROM accounts
//	    WHERE get_byte(uuid_send(id), 15) = p.bucket AND id = p.account_id AND (filter) LIMIT 1) a
//	WHERE p.task = $1 AND p.plan = $2 AND p.cycle_start = $3
//	GROUP BY 1, 2
func pinMovesSQL(spec *taskspec.Spec, schema string) string {
	return "SELECT p.bucket, p.slot, count(*) FROM " + sqlbucket.QualifiedTable(schema, taskspec.PinsTable) + " p" +
		" CROSS JOIN LATERAL (SELECT 1 FROM " + spec.QualifiedTable + " WHERE " + spec.BucketExpr() + " = p.bucket AND " +
		spec.QuotedID + " = p.account_id" + spec.FilterClause + " LIMIT 1) a" +
		" WHERE p.task = $1 AND p.plan = $2 AND p.cycle_start = $3" +
		" GROUP BY 1, 2"
}

// pinMoves returns, per slot of the task's cycle at cycleStart that
// follows the pins ref, the accounts pinned to it (in) and those of its
// hash slot pinned in the cycle (out; an account pinned to its own hash
// slot is in both), as the cycle's per-slot jobs serve them: an account
// pinned to slot p is served in slot p + ref.Shift, and one pinned to a
// slot out of range is served nowhere. Nil slices for hash placement.
func (s *Scheduler) pinMoves(ctx context.Context, spec *taskspec.Spec, ref *taskspec.PinsRef, cycleStart time.Time) (in, out []int64, err error) {
	if ref == nil {
		return nil, nil, nil
	}
	slots := spec.Plan.Slots
	key := strings.Join([]string{"pins", spec.Name, spec.PlanID, ref.Schema, ref.Task, ref.Plan, strconv.Itoa(ref.Shift), ref.PinsCycle(cycleStart).Format(time.RFC3339Nano)}, "\x00")
	counts, err := s.cachedCounts(key, func() ([]int64, error) {
		rows, err := spec.AccountsDB(s.pool).Query(ctx, pinMovesSQL(spec, ref.Schema), ref.Task, ref.Plan, ref.PinsCycle(cycleStart))
		if err != nil {
			return nil, fmt.Errorf("error counting the accounts pinned in the cycle (pins of task %q, plan %s): %w", ref.Task, ref.Plan, err)
		}
		counts := make([]int64, 2*slots) // in, then out
		var (
			bucket, slot int
			n            int64
		)
		if _, err := pgx.ForEachRow(rows, []any{&bucket, &slot, &n}, func() error {
			if bucket < 0 || bucket >= spec.Plan.Buckets {
				return nil
			}
			counts[slots+spec.Plan.Shift(bucket/spec.Plan.BucketsPerSlot, spec.Shift)] += n
			if slot >= 0 && slot < slots {
				counts[spec.Plan.Shift(slot, ref.Shift)] += n
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("error counting the accounts pinned in the cycle (pins of task %q, plan %s): %w", ref.Task, ref.Plan, err)
		}
		return counts, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return counts[:slots], counts[slots:], nil
}

// Off slots: a done slot whose selected accounts differ from Expected by
// more than max(offSlotMin, Expected / offSlotDivisor).
const (
	offSlotMin     = 10
	offSlotDivisor = 10
)

func offSlot(selected, expected int64) bool {
	d := selected - expected
	if d < 0 {
		d = -d
	}
	return d > max(offSlotMin, expected/offSlotDivisor)
}

func (s *Scheduler) cycleStatus(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time, counts []int64, now time.Time) (*CycleStatus, error) {
	nSlots := spec.Slots(cycleStart)
	c := &CycleStatus{CycleStart: cycleStart, Slots: nSlots, Plan: spec.PlanID, NextSlot: -1, OffSlot: -1, FailedSlot: -1, PerSlot: make([]SlotStatus, nSlots)}
	for i := range c.PerSlot {
		c.PerSlot[i] = SlotStatus{Slot: i, Start: spec.SlotStart(cycleStart, i), State: SlotMissing}
		if c.NextSlot < 0 && c.PerSlot[i].Start.After(now) {
			c.NextSlot, c.NextSlotAt = i, c.PerSlot[i].Start
		}
	}
	table := s.riverTable(spec)
	cycleKey := cycleStart.Format(time.RFC3339Nano)

	// The cycle and its slots, from the ledger: what the bootstrap
	// decided (placement, pins) and each slot's state and figures. River's
	// job table is read only for the slots not finished, by their job's
	// primary key: is it queued, running, retrying, or gone?
	led := s.ledger()
	var (
		// outcomes are how the cycle's sync jobs ended, from its row.
		outcomes ledger.Outcomes
		// ref is the pins the cycle follows, as its bootstrap recorded
		// them; a cycle recorded before placements were (and a cycle not
		// bootstrapped yet) follows the task's configuration, as a
		// per-slot worker does.
		ref = spec.PinsRef()
	)
	rec, recorded, err := led.CycleRecord(ctx, s.pool, spec.Name, spec.PlanID, cycleStart)
	if err != nil {
		return nil, err
	}
	// A sharded task's cycle: the map its bootstrap followed (or, before
	// it ran, the one in force) says which slots are this shard's.
	shardMap, sharded, err := led.ShardMapAt(ctx, s.pool, spec.Name, cycleStart)
	if recorded && rec.Shard != "" {
		shardMap, sharded, err = led.ShardMapVersion(ctx, s.pool, spec.Name, rec.ShardVersion)
	}
	if err != nil {
		return nil, err
	}
	if sharded {
		c.Shard, c.ShardVersion = cmp.Or(rec.Shard, s.shard), shardMap.Version
		for i := range c.PerSlot {
			if shardMap.SlotOwner(spec.Plan, spec.Shift, i) != c.Shard {
				c.PerSlot[i].State = SlotElsewhere
				c.SlotsElsewhere++
			}
		}
	}
	if recorded {
		outcomes = rec.Outcomes
		c.PinsFallback = rec.Fallback
		switch rec.Placement {
		case perslot.PlacementHash:
			ref = nil
		case perslot.PlacementPinned:
			if rec.Pins != nil && rec.Pins.Task != "" && rec.Pins.Plan != "" {
				ref = rec.Pins
			}
		}
	}
	slots, err := led.Slots(ctx, s.pool, spec.Name, spec.PlanID, cycleStart)
	if err != nil {
		return nil, err
	}
	var pending []int64
	for _, r := range slots {
		if r.Finished == nil && r.JobID != 0 {
			pending = append(pending, r.JobID)
		}
	}
	jobs, err := s.slotJobs(ctx, pending)
	if err != nil {
		return nil, err
	}
	for slot, r := range slots {
		if slot < 0 || slot >= len(c.PerSlot) || c.PerSlot[slot].State == SlotElsewhere {
			continue
		}
		p := &c.PerSlot[slot]
		p.jobID = r.JobID
		if r.Finished != nil {
			p.State = SlotDone
			p.Enqueued, p.Skipped, p.Batches = r.Inserted, r.Skipped, r.Batches
			c.SlotsDone++
			c.Enqueued += p.Enqueued
			c.Skipped += p.Skipped
			if j, ok := jobs[r.JobID]; ok {
				p.Attempts = j.attempt
			}
			continue
		}
		j, ok := jobs[r.JobID]
		switch {
		case !ok:
			p.State = SlotFailed
			p.Error = r.Error
			if p.Error == "" {
				p.Error = fmt.Sprintf("per-slot job %d is no longer in River's job table and never finished its fan-out (cancelled or discarded, then deleted by River's retention)", r.JobID)
			}
		case j.state == "discarded" || j.state == "cancelled":
			p.State, p.Error = SlotFailed, cmp.Or(j.err, r.Error)
		case j.state == "running" || j.state == "retryable":
			p.State, p.Error = SlotRunning, cmp.Or(j.err, r.Error)
		default:
			// Scheduled, or snoozed while it waits for the accounts
			// database: the ledger says why.
			p.State, p.Error = SlotScheduled, r.Error
		}
		if p.State != SlotFailed && r.Error != "" && c.WaitingError == "" {
			c.WaitingError = r.Error
		}
		if ok {
			p.Attempts = j.attempt
		}
		// Progress so far, as its batches recorded it in the ledger.
		p.Enqueued, p.Skipped, p.Batches = r.Inserted, r.Skipped, r.Batches
		if p.State == SlotFailed {
			c.SlotsFailed++
			if c.FailedSlot < 0 || slot < c.FailedSlot {
				c.FailedSlot, c.FailedError = slot, p.Error
			}
		}
		c.Enqueued += p.Enqueued
		c.Skipped += p.Skipped
	}

	// The accounts each slot selects under the cycle's placement.
	c.Placement = PlacementHash
	if ref != nil {
		c.Placement, c.PinsTask, c.PinsShift = PlacementPinned, ref.Task, ref.Shift
	}
	if counts == nil { // from the jobs alone: see jobsExpected
		ref, counts = nil, make([]int64, nSlots)
	}
	in, out, err := s.pinMoves(ctx, spec, ref, cycleStart)
	if err != nil {
		if !taskspec.Unreachable(err) {
			return nil, err
		}
		in, out, c.AccountsError = nil, nil, accountsErrorText(err)
	}
	for i := range c.PerSlot {
		p := &c.PerSlot[i]
		if p.State == SlotElsewhere {
			continue // counted by its own shard
		}
		p.Expected = counts[i]
		if in != nil {
			p.PinnedIn, p.PinnedOut = in[i], out[i]
			p.Expected += in[i] - out[i]
		}
		c.AccountsExpected += p.Expected
	}

	// Unfinished sync jobs (few, by design: through River's fetching index)
	// and finished-but-failed ones (through its finalized_at index).
	if err := s.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state IN ('scheduled', 'available', 'pending')),
			count(*) FILTER (WHERE state = 'running'),
			count(*) FILTER (WHERE state = 'retryable')
		FROM `+table+` WHERE state IN ('scheduled', 'available', 'pending', 'running', 'retryable')
		  AND kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3`,
		syncjob.Kind, spec.Name, cycleKey).Scan(&c.Pending, &c.Running, &c.Retryable); err != nil {
		return nil, fmt.Errorf("error counting the cycle's unfinished sync jobs: %w", err)
	}
	c.Synced, c.Gone = outcomes.Synced(), outcomes.Gone()
	c.SkippedStale, c.SkippedUpstream = outcomes.Stale(), outcomes.Upstream()
	c.Completed = c.Synced + c.Gone + c.SkippedStale + c.SkippedUpstream
	c.Discarded, c.Cancelled = outcomes.Failed(), outcomes.Cancelled()
	c.LatenessSample = outcomes.Lateness.Count()
	c.LatenessP50, c.LatenessKnown = outcomes.Lateness.Quantile(0.5)
	c.LatenessP99, _ = outcomes.Lateness.Quantile(0.99)

	// Behind: slots past their middle whose fan-out has not finished. Off:
	// done slots that selected other accounts than the placement expects.
	for _, p := range c.PerSlot {
		if open(p) && !now.Before(p.Start.Add(spec.SlotLen(c.CycleStart, p.Slot)/2)) {
			c.BehindSlots++
		}
		if p.State == SlotDone && offSlot(p.Enqueued+p.Skipped, p.Expected) {
			c.OffSlots++
			if c.OffSlot < 0 {
				c.OffSlot = p.Slot
			}
		}
	}
	switch {
	case c.FailedSlot >= 0:
		c.Verdict = fmt.Sprintf("failed slot %d: %s", c.FailedSlot, c.FailedError)
	case c.BehindSlots > 0 && c.WaitingError != "":
		c.Verdict = fmt.Sprintf("behind by %d slots: %s", c.BehindSlots, c.WaitingError)
	case c.BehindSlots > 0:
		c.Verdict = fmt.Sprintf("behind by %d slots", c.BehindSlots)
	case c.OffSlots > 0:
		p := c.PerSlot[c.OffSlot]
		c.Verdict = fmt.Sprintf("slot %d selected %d accounts, %d expected (%d done slots off by more than max(%d, 1/%d))",
			p.Slot, p.Enqueued+p.Skipped, p.Expected, c.OffSlots, offSlotMin, offSlotDivisor)
	default:
		c.OnTrack, c.Verdict = true, "on track"
	}
	return c, nil
}

// open reports whether the slot's fan-out is this shard's and has not
// ended.
func open(p SlotStatus) bool {
	return p.State != SlotDone && p.State != SlotFailed && p.State != SlotElsewhere
}

// errNoRiverSchema is returned when Status runs before Configure.
var errNoRiverSchema = errors.New("call Configure before Status: Status reads River's tables in river.Config.Schema")

// StartingGrace is how long after River's leader is elected (or, with no
// leader, after a slot passed its middle) a cycle whose slots wait for
// their fan-out is said to be starting rather than behind: River's leader
// promotes scheduled jobs every few seconds once elected.
const StartingGrace = 30 * time.Second

// checkStarting turns c's "behind" verdict into "starting" while River is
// starting (see CycleStatus.Starting). It reads River's one-row
// river_leader table.
func (s *Scheduler) checkStarting(ctx context.Context, spec *taskspec.Spec, c *CycleStatus, now time.Time) error {
	if c.BehindSlots == 0 || c.FailedSlot >= 0 {
		return nil
	}
	// Only slots whose per-slot jobs River would run at once can be
	// starting: not missing, retrying or held for later.
	var behind []int
	for _, p := range c.PerSlot {
		if p.State == SlotMissing {
			return nil
		}
		if open(p) && !now.Before(p.Start.Add(spec.SlotLen(c.CycleStart, p.Slot)/2)) {
			behind = append(behind, p.Slot)
		}
	}
	var ids []int64
	for _, slot := range behind {
		if id := c.PerSlot[slot].jobID; id != 0 {
			ids = append(ids, id)
		}
	}
	var held int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.riverTable(spec)+
		" WHERE id = ANY($1) AND (state IN ('retryable', 'pending') OR (state IN ('scheduled', 'available') AND scheduled_at > now()))",
		ids).Scan(&held); err != nil {
		return fmt.Errorf("error reading the cycle's waiting per-slot jobs: %w", err)
	}
	if held > 0 {
		return nil
	}
	var elected float64
	err := s.pool.QueryRow(ctx, "SELECT extract(epoch FROM now() - elected_at)::float8 FROM "+
		sqlbucket.QualifiedTable(s.riverSchema, "river_leader")+" LIMIT 1").Scan(&elected)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		for _, p := range c.PerSlot {
			mid := p.Start.Add(spec.SlotLen(c.CycleStart, p.Slot) / 2)
			if open(p) && now.Sub(mid) >= StartingGrace {
				return nil
			}
		}
		c.Starting = true
		c.Verdict = fmt.Sprintf("starting: no River leader elected yet (%d slots wait for their fan-out)", c.BehindSlots)
	case err != nil:
		return fmt.Errorf("error reading River's leader: %w", err)
	case time.Duration(elected*float64(time.Second)) < StartingGrace:
		c.Starting = true
		c.Verdict = fmt.Sprintf("starting: River's leader was elected %.0fs ago (%d slots wait for their fan-out)", elected, c.BehindSlots)
	}
	return nil
}
