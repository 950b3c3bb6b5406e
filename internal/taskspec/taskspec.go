// Package taskspec holds the validated form of one riverslot task: its slot
// plan, schedule, seed, quoted table, filter clause, prepared SQL and insert
// options. riverslot builds one Spec per task, once, and hands the same
// pointer to the bootstrap, per-slot and sync tiers and to its own Check, so
// no two parts can disagree about a task.
package taskspec

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverslot/riverslot/internal/metrics"
	"github.com/riverslot/riverslot/internal/upstream"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// Spec is one task, defaulted and validated. Build it with riverslot.New;
// treat it as read-only.
type Spec struct {
	Name     string
	Plan     slotplan.Plan
	Schedule slotplan.Schedule
	Seed     uint64

	// Month is the calendar-month layout of a monthly task (Plan is then
	// the longest month's shape, a bound: see Slots, SlotStart and the
	// other layout methods), nil for a task of a fixed Cycle.
	Month *slotplan.Monthly

	// Shift is the task's phase in slots: the accounts of bucket slot k are
	// served in slot Plan.Shift(k, Shift).
	Shift int

	// Key names the slot layout and offsets jobs are made for: cycle,
	// slots, seed, bucket count and shift. Bootstrap and per-slot jobs
	// carry it, so a job made under another plan is recognised, runs under
	// its own plan (ForPlan) and never collides with this plan's cycles.
	// PlanID is its written form (Key.String()), set with it: the ledger
	// and the sync jobs' tags hold it.
	Key    PlanKey
	PlanID string

	// AccountsPool reaches the database holding the accounts table (and a
	// weighted task's pins tables, created next to it), when that is not
	// River's: see AccountsDB. Nil: River's database.
	AccountsPool *pgxpool.Pool

	// Schema, Table and IDColumn are the raw identifiers; QualifiedTable and
	// QuotedID are their quoted forms.
	Schema, Table, IDColumn  string
	QualifiedTable, QuotedID string

	// Filter is the raw filter ("" for none), validated as one balanced
	// expression; FilterClause is " AND (filter)" or "".
	Filter, FilterClause string

	// Weight is the raw weight expression ("" for none: hash placement
	// only), validated as one balanced expression; WeightEpsilon its load
	// bound (see slotplan.Balance).
	Weight        string
	WeightEpsilon float64

	// PinsFrom is, for a task OppositeOf a weighted task, that task's spec:
	// this task follows its pins, shifted by half the slots, so the two
	// tasks never meet on an account, pinned or not. Nil otherwise.
	PinsFrom *Spec

	// Opposed is set on both tasks of an OppositeOf pair: a late account
	// is then spread only within the rest of its own slot (see PlaceIn),
	// so that the two tasks' syncs of it stay at least half a cycle minus
	// a slot apart however late either fans out.
	Opposed bool

	// Upstream is the accounts table's SQL expression whose value (cut to
	// upstream.MaxKeyLen bytes) names the account's upstream; "" puts
	// every account on the task's default upstream (key ""). Limits are
	// each upstream's limits, defaults applied.
	Upstream string
	Limits   upstream.Limits

	BatchSize  int
	LatePolicy LatePolicy
	LateGrace  time.Duration
	// FirstCycle is what the task's first cycle does when it started
	// before its bootstrap ran.
	FirstCycle FirstCycle

	// Lead is how long before its slot a per-slot job runs; TriggerLead is
	// how long before a cycle start the periodic trigger fires.
	Lead, TriggerLead time.Duration

	PerSlotTimeout, SyncTimeout time.Duration

	// PinsTimeout bounds a weighted bootstrap's pin computation; past it
	// the cycle falls back to the latest computed pins, else to hash
	// placement. BootstrapTimeout is the bootstrap job's timeout.
	PinsTimeout, BootstrapTimeout time.Duration

	// DirectMax is the largest fleet (accounts matching the filter) whose
	// pins a weighted bootstrap computes directly, scanning the accounts
	// table in its own transaction; above it the pins come from a weight
	// census taken in bounded steps ahead of the cycle. 0: always a
	// census. riverslot sets PinsDirectMax.
	DirectMax int64

	// ControlQueue and ControlPriority are used for bootstrap and per-slot
	// jobs.
	ControlQueue    string
	ControlPriority int

	// SyncOpts shape every sync job (queue, priority, max attempts);
	// ScheduledAt is set per account.
	SyncOpts river.InsertOpts

	SQL SQL

	// Metrics records the task's OpenTelemetry metrics (nil: none).
	Metrics *metrics.Instruments
	// Pins holds the weighted placement's queries; set only when Weighted.
	Pins PinsSQL
}

// SQL holds the queries the tiers run for a task, built once.
type SQL struct {
	// FirstPage selects the first keyset page of a slot's accounts:
	// $1, $2 bucket bounds, $3 limit. Rows are (id, bucket).
	FirstPage string
	// NextPage is FirstPage after the keyset position ($4 bucket, $5 id).
	NextPage string
	// Exists says whether account $1 still exists and matches the filter.
	Exists string
}

// AccountsDB returns the pool the task's accounts (and pins) are read
// through: AccountsPool, else riverPool (the accounts live in River's
// database).
func (s *Spec) AccountsDB(riverPool *pgxpool.Pool) *pgxpool.Pool {
	if s.AccountsPool != nil {
		return s.AccountsPool
	}
	return riverPool
}

// SeparateAccounts reports whether the accounts live in another database
// than River's jobs: their reads then run on AccountsPool, outside River's
// transactions.
func (s *Spec) SeparateAccounts() bool { return s.AccountsPool != nil }

// PlanID returns the plan identifier of plan, seed and shift, e.g.
// "120s/8/9c1185a5c5e9fc54", or "120s/8/9c1185a5c5e9fc54/+4" for a task
// whose slots are shifted by 4. A plan of 65,536 buckets says so after the
// seed: "86400s/1024/9c1185a5c5e9fc54/b65536", so it never equals a 256-bucket
// plan's id (256-bucket ids are as they always were).
func PlanID(plan slotplan.Plan, seed uint64, shift int) string {
	return KeyOf(plan, seed, shift).String()
}

// SetKey sets the spec's plan key and its written form, PlanID.
func (s *Spec) SetKey(k PlanKey) { s.Key, s.PlanID = k, k.String() }

// planTagPrefix starts the River tag that names a sync job's plan.
const planTagPrefix = "riverslot-plan-"

// planTagReplacer turns a plan id into the characters River allows in a
// tag (word characters and '-'); planTagReverse undoes it ('_' and 'p'
// appear in no plan id).
var (
	planTagReplacer = strings.NewReplacer("/", "_", "+", "p")
	planTagReverse  = strings.NewReplacer("_", "/", "p", "+")
)

// PlanTag returns the River tag that names planID in the sync jobs of its
// cycles. The plan travels in the job's tags, which River stores but does
// not index, instead of its args, which River indexes with a GIN index:
// one more key and value per row made the fan-out 4% slower against
// River's own insert (0.88 against 0.92 of it, 1M accounts).
//
// A calendar-month plan's id holds its zone's name, whose '_', '+' and
// '/' the replacer cannot tell apart: its tag is "m" and the id in hex.
func PlanTag(planID string) string {
	if strings.HasPrefix(planID, monthPrefix) {
		return planTagPrefix + "m" + hex.EncodeToString([]byte(planID))
	}
	return planTagPrefix + planTagReplacer.Replace(planID)
}

// PlanFromTags returns the plan of PlanTag among tags: ok is false when
// none is there, err says why a tag that is there does not name a plan.
func PlanFromTags(tags []string) (key PlanKey, ok bool, err error) {
	for _, t := range tags {
		if rest, found := strings.CutPrefix(t, planTagPrefix); found {
			if h, monthly := strings.CutPrefix(rest, "m"); monthly {
				id, err := hex.DecodeString(h)
				if err != nil {
					return PlanKey{}, true, fmt.Errorf("%w: tag %q: %w", ErrPlanID, t, err)
				}
				key, err := ParsePlanKey(string(id))
				return key, true, err
			}
			key, err := ParsePlanKey(planTagReverse.Replace(rest))
			return key, true, err
		}
	}
	return PlanKey{}, false, nil
}

// PinsRef returns the pins a cycle of this task follows: its own for a
// weighted task, the task's it is OppositeOf (shifted by the difference of
// their shifts, half the slots) when that one is weighted, else nil (hash
// placement).
func (s *Spec) PinsRef() *PinsRef {
	switch {
	case s.PinsFrom != nil:
		return &PinsRef{Task: s.PinsFrom.Name, Plan: s.PinsFrom.PlanID, Schema: s.PinsFrom.Schema, Shift: s.Plan.Shift(s.Shift, -s.PinsFrom.Shift)}
	case s.Weighted():
		return &PinsRef{Task: s.Name, Plan: s.PlanID, Schema: s.Schema}
	}
	return nil
}

// BuildSQL fills s.QualifiedTable, s.QuotedID, s.FilterClause and s.SQL from
// the raw identifiers and filter.
func (s *Spec) BuildSQL() {
	s.QualifiedTable = sqlbucket.QualifiedTable(s.Schema, s.Table)
	s.QuotedID = pgx.Identifier{s.IDColumn}.Sanitize()
	s.FilterClause = ""
	if s.Filter != "" {
		s.FilterClause = " AND (" + s.Filter + ")"
	}

	bucket := s.BucketExpr()
	head := "SELECT " + s.QuotedID + ", " + bucket + ", " + s.UpstreamExpr() + " FROM " + s.QualifiedTable +
		" WHERE " + s.SlotPredicate(1, 2)
	tail := s.FilterClause + " ORDER BY " + bucket + ", " + s.QuotedID + " LIMIT $3"
	keyset := " AND (" + bucket + ", " + s.QuotedID + ") > ($4::int, $5::uuid)"
	s.SQL = SQL{
		FirstPage: head + tail,
		NextPage:  head + keyset + tail,
		Exists:    "SELECT EXISTS (SELECT 1 FROM " + s.QualifiedTable + " WHERE " + s.QuotedID + " = $1" + s.FilterClause + ")",
	}
	s.Pins = PinsSQL{}
	if s.Weighted() {
		s.buildPinsSQL()
	}
}

// UpstreamExpr is the text expression of an account's upstream key in a
// page query: Upstream, cut to at most upstream.MaxKeyLen bytes on a
// character boundary (upstream.CutKey), ” when unset or NULL.
func (s *Spec) UpstreamExpr() string {
	if s.Upstream == "" {
		return "''::text"
	}
	return upstream.CutKeySQL("(" + s.Upstream + ")::text")
}

// UsesUpstreamLimiter reports whether the task's syncs go through the
// upstream limiter: Upstream or a limit is set. A task with neither costs
// its syncs nothing.
func (s *Spec) UsesUpstreamLimiter() bool {
	return s.Upstream != "" || s.Limits.Rate > 0 || s.Limits.Concurrency > 0 || s.Limits.FailureThreshold > 0
}

// BucketExpr is the bucket expression of the task's ID column for its
// plan's bucket count (sqlbucket.ExprFor).
func (s *Spec) BucketExpr() string {
	return sqlbucket.ExprFor(s.IDColumn, s.buckets())
}

// SlotPredicate is the sargable predicate of the task's bucket range, with
// the bounds as bind parameters $lo and $hi (sqlbucket.SlotPredicateFor).
func (s *Spec) SlotPredicate(lo, hi int) string {
	return sqlbucket.SlotPredicateFor(s.IDColumn, s.buckets(), lo, hi)
}

// IndexName and IndexDDL are the name and DDL of the bucket index the
// task's per-slot selection reads (sqlbucket.IndexNameFor, IndexDDLFor).
func (s *Spec) IndexName() string { return sqlbucket.IndexNameFor(s.Table, s.IDColumn, s.buckets()) }

// IndexDDL: see IndexName.
func (s *Spec) IndexDDL() string {
	return sqlbucket.IndexDDLFor(s.Schema, s.Table, s.IDColumn, s.buckets())
}

func (s *Spec) buckets() int { return cmp.Or(s.Plan.Buckets, slotplan.Buckets) }

// BootstrapOpts returns the insert options of a bootstrap job: the control
// queue and priority, unique by args in every state. It runs as soon as it
// is inserted.
func (s *Spec) BootstrapOpts() *river.InsertOpts {
	return &river.InsertOpts{
		Queue:      s.ControlQueue,
		Priority:   s.ControlPriority,
		UniqueOpts: UniqueEveryState(),
	}
}

// PerSlotStart is when the per-slot job of slot runs: Lead before the slot.
func (s *Spec) PerSlotStart(cycleStart time.Time, slot int) time.Time {
	return s.SlotStart(cycleStart, slot).Add(-s.Lead)
}

// UniqueEveryState is unique by args while a job with the same args exists in
// any state, discarded and cancelled included: re-inserting a cycle never
// creates a second bootstrap or per-slot job next to a failed one (which an
// operator retries instead, resuming from its cursor).
func UniqueEveryState() river.UniqueOpts {
	return river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStateCancelled, rivertype.JobStateCompleted,
		rivertype.JobStateDiscarded, rivertype.JobStatePending, rivertype.JobStateRetryable,
		rivertype.JobStateRunning, rivertype.JobStateScheduled,
	}}
}

// WithLate returns s with the late policy a cycle's bootstrap recorded
// (policy empty: none recorded, s as it is): the cycle's late accounts are
// placed, and judged by a later plan, as the cycle decided, whatever the
// node that runs its fan-outs has configured since.
func (s *Spec) WithLate(policy LatePolicy, grace time.Duration) *Spec {
	if policy == "" || policy.Validate() != nil || grace < 0 || (policy == s.LatePolicy && grace == s.LateGrace) {
		return s
	}
	other := *s
	other.LatePolicy, other.LateGrace = policy, grace
	return &other
}

// ForPlan returns the spec a job made for the plan of key runs under: s
// itself for its own plan (or the zero key, jobs made before plans were
// recorded), else a copy
// of s with that plan's cycle, slots and seed, on a UTC grid through
// cycleStart. Jobs always run under the plan they were made for, so a
// change of Cycle or Seed, or a rolling deploy where nodes disagree, never
// mixes two plans inside one cycle.
func (s *Spec) ForPlan(key PlanKey, cycleStart time.Time) (*Spec, error) {
	if err := key.Err(); err != nil {
		return nil, err
	}
	if key.IsZero() || key == s.Key {
		return s, nil
	}
	if key.Month != "" {
		return s.forMonth(key)
	}
	plan, err := key.Plan()
	if err != nil {
		return nil, err
	}
	cycle := key.Cycle
	offset := time.Duration(cycleStart.UnixNano()) % cycle
	if offset < 0 {
		offset += cycle
	}
	schedule, err := slotplan.NewSchedule(cycle, offset, nil)
	if err != nil {
		return nil, fmt.Errorf("plan id %q: %w", key, err)
	}
	other := *s
	other.Plan, other.Schedule, other.Seed, other.Shift, other.Month = plan, schedule, key.Seed, key.Shift, nil
	other.SetKey(key)
	if other.PinsFrom != nil && (other.PinsFrom.Plan.Cycle != plan.Cycle || other.PinsFrom.Plan.Buckets != plan.Buckets) {
		// The task it is OppositeOf has no cycle of this plan's length
		// (or buckets) to follow: the bootstrap of such a cycle places by
		// hash.
		other.PinsFrom = nil
	}
	if plan.Buckets != s.Plan.Buckets {
		// The bucket expression differs: the plan's own queries.
		other.BuildSQL()
	}
	other.Lead = min(s.Lead, plan.SlotDuration/2)
	other.LateGrace = min(s.LateGrace, cycle)
	return &other, nil
}

// forMonth is ForPlan for the calendar-month plan key (a monthly task's
// cycle run by a node whose task is not monthly, or monthly in another
// zone or with another seed): months in the key's zone, 65,536 buckets,
// hash placement.
func (s *Spec) forMonth(key PlanKey) (*Spec, error) {
	loc, err := key.Location()
	if err != nil {
		return nil, fmt.Errorf("plan id %q: %w", key, err)
	}
	month, err := slotplan.NewMonthly(loc)
	if err != nil {
		return nil, fmt.Errorf("plan id %q: %w", key, err)
	}
	schedule, err := slotplan.NewMonthlySchedule(loc)
	if err != nil {
		return nil, fmt.Errorf("plan id %q: %w", key, err)
	}
	other := *s
	other.Plan, other.Schedule, other.Seed, other.Shift, other.Month = monthlyPlan, schedule, key.Seed, 0, &month
	other.SetKey(key)
	other.PinsFrom, other.Opposed, other.Weight = nil, false, "" // hash placement
	other.BuildSQL()
	other.Lead = min(s.Lead, monthlyPlan.SlotDuration/2)
	if s.Month == nil {
		// A day's grace, as a monthly task's default.
		other.LateGrace = monthlyPlan.SlotDuration
	}
	return &other, nil
}
