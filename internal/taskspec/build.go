package taskspec

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/internal/upstream"
	"github.com/riverslot/riverslot/slotplan"
)

// Defaults and bounds of a task's fields (riverslot.Task documents each;
// riverslot exports them under the same names). Build applies a default to
// a field left at its zero value and refuses a value out of bounds,
// naming the field.
const (
	IDColumnDefault       = "id"             // Task.IDColumn
	BatchSizeDefault      = 2000             // Task.BatchSize, accounts per fan-out transaction
	BatchSizeMax          = 50_000           // the largest Task.BatchSize Build accepts
	PriorityDefault       = 2                // Task.Priority of sync jobs (River: 1 highest, 4 lowest)
	MaxAttemptsDefault    = 5                // Task.MaxAttempts of a sync job
	SyncTimeoutDefault    = time.Minute      // Task.SyncTimeout, one Sync call
	PerSlotTimeoutDefault = time.Minute      // Task.PerSlotTimeout, one fan-out attempt
	PinsTimeoutDefault    = 30 * time.Second // Task.PinsTimeout, a weighted cycle's pin computation

	// CycleMin is the shortest Cycle: River's scheduler promotes scheduled
	// jobs every 5 s, so a shorter cycle's slots could not start on time.
	CycleMin = 16 * time.Second

	// PinsDirectMax is the largest fleet (accounts matching Filter) whose
	// pins a weighted bootstrap computes directly, scanning the accounts
	// table in its own transaction (about a second at 1,000,000 accounts
	// on 2 cores, so a fifth of that here). A larger fleet's pins come from
	// a weight census taken in bounded steps by a census job during the
	// previous cycle (docs/weights-and-phases.md).
	PinsDirectMax = 200_000

	// LeadMax caps the default Lead, which is min(LeadMax, half a slot).
	LeadMax = 10 * time.Second

	// ControlPriority is the River priority of bootstrap and per-slot jobs.
	ControlPriority = 1
)

// Config is one task as riverslot.Task describes it (riverslot.Task
// documents each field), without its SyncFunc: HasSync says whether it has
// one. Build turns configs into specs, the one place a task is validated
// and becomes its spec; riverslot.New and riverslot's simulator both call
// it.
type Config struct {
	Name           string
	Cycle          time.Duration
	Monthly        bool
	Buckets        int
	TriggerOffset  time.Duration
	Location       *time.Location
	AccountsPool   *pgxpool.Pool
	Schema         string
	Table          string
	IDColumn       string
	Filter         string
	Weight         string
	WeightEpsilon  float64
	PinsTimeout    time.Duration
	Phase          float64
	OppositeOf     string
	Seed           uint64
	BatchSize      int
	Queue          string
	ControlQueue   string
	Priority       int
	MaxAttempts    int
	SyncTimeout    time.Duration
	PerSlotTimeout time.Duration
	Lead           time.Duration
	LatePolicy     LatePolicy
	LateGrace      time.Duration
	FirstCycle     FirstCycle
	Upstream       string
	Limits         upstream.Limits
	HasSync        bool
}

// Build validates every task, in one pass down: each config's defaults and
// bounds (every problem of every task reported at once, each prefixed with
// "Tasks[i] name: " and naming the field and the fix), the tasks' names
// unique, OppositeOf pairs resolved (shift, opposition, the weighted
// task's pins), then each spec finished: its plan key and, for a task
// that follows pins, its bootstrap timeout. The specs are in configs'
// order, the invalid ones left out (Build then returns an error).
func Build(configs []Config) ([]*Spec, error) {
	var (
		errs   []error
		specs  []*Spec
		byName = make(map[string]*Spec)
		seen   = make(map[string]int)
	)
	for i, t := range configs {
		prefix := fmt.Sprintf("Tasks[%d] %q: ", i, t.Name)
		if first, dup := seen[t.Name]; dup && t.Name != "" {
			errs = append(errs, fmt.Errorf("%sName is already used by Tasks[%d]; task names must be unique", prefix, first))
		}
		seen[t.Name] = i
		spec, err := newSpec(t)
		if err != nil {
			errs = append(errs, prefixErrors(prefix, err))
			continue
		}
		if _, dup := byName[spec.Name]; dup {
			continue // reported above
		}
		specs = append(specs, spec)
		byName[spec.Name] = spec
	}
	errs = append(errs, resolveOpposites(configs, byName, Names(specs))...)
	for _, spec := range specs {
		// The plan's key, once its shift is final (OppositeOf sets it).
		if spec.Month != nil {
			spec.SetKey(MonthKey(spec.Month.Location().String(), spec.Seed))
		} else {
			spec.SetKey(KeyOf(spec.Plan, spec.Seed, spec.Shift))
		}
	}
	for _, spec := range specs {
		owner := spec
		if spec.PinsFrom != nil {
			owner = spec.PinsFrom
		}
		if spec.PinsRef() != nil {
			// The pins get half; the rest of the bootstrap (the fallback,
			// the per-slot inserts) the other half.
			spec.BootstrapTimeout = 2 * owner.PinsTimeout
		}
	}
	if err := errors.Join(errs...); err != nil {
		return specs, err
	}
	return specs, nil
}

// Names lists the specs' task names, quoted, for error messages.
func Names(specs []*Spec) string {
	names := ""
	for i, spec := range specs {
		if i > 0 {
			names += ", "
		}
		names += fmt.Sprintf("%q", spec.Name)
	}
	return names
}

var taskNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// newSpec defaults and validates t and returns its spec, or every problem
// found, each naming the field and the fix.
func newSpec(t Config) (*Spec, error) {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if !taskNameRE.MatchString(t.Name) {
		add("Name must be 1-64 letters, digits, '_', '-' or '.', got %q", t.Name)
	}
	var (
		plan     slotplan.Plan
		planErr  error
		schedule slotplan.Schedule
		month    *slotplan.Monthly
		short    bool
	)
	if t.Monthly {
		plan, schedule, month = monthlyTask(&t, add)
	} else {
		t.Buckets = cmp.Or(t.Buckets, slotplan.Buckets)
		if t.Buckets != slotplan.Buckets && t.Buckets != slotplan.BucketsTwoByte {
			add("Buckets must be %d (one UUID byte, the default) or %d (two bytes, finer slots), got %d; leave it 0 for the default", slotplan.Buckets, slotplan.BucketsTwoByte, t.Buckets)
		}
		// A cycle's own errors come from NewSchedule below, a bad Buckets from
		// the check above.
		// riverslot's own minimum comes first: slotplan's (2 s) is the
		// math's, not what River can run.
		plan, planErr = slotplan.NewBuckets(t.Cycle, t.Buckets)
		short = t.Cycle < CycleMin
		if short {
			add("Cycle must be at least %s (River's scheduler promotes jobs every 5 s; slots of a shorter cycle cannot start on time), got %s; use e.g. 32s, 120s, 1h or 24h, or set Monthly for calendar months", CycleMin, t.Cycle)
			planErr = errors.New("cycle too short")
		}
		var err error
		schedule, err = slotplan.NewSchedule(t.Cycle, t.TriggerOffset, t.Location)
		if err != nil && !short {
			errs = append(errs, err)
		}
	}
	if t.Table == "" {
		add("Table must be set to the table holding the accounts")
	}
	t.IDColumn = cmp.Or(t.IDColumn, IDColumnDefault)
	for _, f := range []struct{ field, value string }{{"Schema", t.Schema}, {"Table", t.Table}, {"IDColumn", t.IDColumn}} {
		if err := checkIdentifier(f.field, f.value); err != nil {
			errs = append(errs, err)
		}
	}
	if t.Filter != "" {
		if err := CheckFilter(t.Filter); err != nil {
			errs = append(errs, err)
		}
	}
	if t.Weight != "" {
		if err := CheckWeight(t.Weight); err != nil {
			errs = append(errs, err)
		}
		t.WeightEpsilon = cmp.Or(t.WeightEpsilon, slotplan.WeightEpsilonDefault)
		if !(t.WeightEpsilon > 0 && t.WeightEpsilon <= 1) {
			add("WeightEpsilon must be in (0, 1] (0.10 lets a slot carry 10%% more than the mean), got %g; leave it 0 for the default", t.WeightEpsilon)
		}
		t.PinsTimeout = cmp.Or(t.PinsTimeout, PinsTimeoutDefault)
		if t.PinsTimeout < time.Millisecond {
			add("PinsTimeout must be at least 1ms, got %s; leave it 0 for the default %s", t.PinsTimeout, PinsTimeoutDefault)
		}
	} else {
		if t.WeightEpsilon != 0 {
			add("WeightEpsilon is set (%g) but Weight is empty; set Weight to the accounts' weight column or expression", t.WeightEpsilon)
		}
		if t.PinsTimeout != 0 {
			add("PinsTimeout is set (%s) but Weight is empty; it bounds the weighted placement only: set Weight or leave PinsTimeout 0", t.PinsTimeout)
		}
	}
	t.BatchSize = cmp.Or(t.BatchSize, BatchSizeDefault)
	if t.BatchSize < 1 || t.BatchSize > BatchSizeMax {
		add("BatchSize must be between 1 and %d, got %d", BatchSizeMax, t.BatchSize)
	}
	t.Queue = cmp.Or(t.Queue, river.QueueDefault)
	t.ControlQueue = cmp.Or(t.ControlQueue, t.Queue)
	t.Priority = cmp.Or(t.Priority, PriorityDefault)
	if t.Priority < 1 || t.Priority > 4 {
		add("Priority must be between 1 and 4, got %d", t.Priority)
	}
	t.MaxAttempts = cmp.Or(t.MaxAttempts, MaxAttemptsDefault)
	if t.MaxAttempts < 1 {
		add("MaxAttempts must be at least 1, got %d", t.MaxAttempts)
	}
	t.SyncTimeout = cmp.Or(t.SyncTimeout, SyncTimeoutDefault)
	if t.SyncTimeout < 0 {
		add("SyncTimeout must not be negative, got %s", t.SyncTimeout)
	}
	t.PerSlotTimeout = cmp.Or(t.PerSlotTimeout, PerSlotTimeoutDefault)
	if t.PerSlotTimeout < 0 {
		add("PerSlotTimeout must not be negative, got %s", t.PerSlotTimeout)
	}
	t.LatePolicy = cmp.Or(t.LatePolicy, LatePolicySpread)
	if err := t.LatePolicy.Validate(); err != nil {
		errs = append(errs, err)
	}
	t.FirstCycle = cmp.Or(t.FirstCycle, FirstCycleLate)
	if err := t.FirstCycle.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !t.HasSync {
		add("Sync must be set to the function that syncs one account")
	}
	if t.Upstream != "" {
		if err := CheckUpstream(t.Upstream); err != nil {
			errs = append(errs, err)
		}
	}
	if err := t.Limits.Validate("Limits."); err != nil {
		errs = append(errs, err)
	}
	t.Limits = t.Limits.WithDefaults()

	if t.OppositeOf != "" && t.Phase != 0 {
		add("Phase and OppositeOf cannot both be set; OppositeOf %q sets Phase to that task's plus 1/2", t.OppositeOf)
	}
	if t.Phase < 0 || t.Phase >= 1 {
		add("Phase must be in [0, 1) (a fraction of the cycle), got %g", t.Phase)
	}
	var shift int
	if planErr == nil && t.Phase > 0 && t.Phase < 1 {
		f := t.Phase * float64(plan.Slots)
		shift = int(math.Round(f))
		if math.Abs(f-float64(shift)) > 1e-9 {
			add("Phase × slots must be a whole number of slots, got %g × %d = %g; use a multiple of 1/%d", t.Phase, plan.Slots, f, plan.Slots)
		}
	}

	if planErr == nil {
		t.LateGrace = cmp.Or(t.LateGrace, plan.SlotDuration)
		switch {
		case t.LateGrace < 0:
			add("LateGrace must not be negative, got %s", t.LateGrace)
		case t.LateGrace > cmp.Or(t.Cycle, MonthMin):
			add("LateGrace must be at most Cycle (%s), got %s; an account later than a cycle is covered by the next cycle", cmp.Or(t.Cycle, MonthMin), t.LateGrace)
		}
		t.Lead = cmp.Or(t.Lead, min(LeadMax, plan.SlotDuration/2))
		if t.Lead < 0 || t.Lead >= plan.SlotDuration {
			add("Lead must be in (0, slot duration) = (0, %s), got %s; leave it 0 for the default, min(%s, half a slot)", plan.SlotDuration, t.Lead, LeadMax)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	if t.Seed == 0 {
		t.Seed = slotplan.SeedFromName(t.Name)
	}
	spec := &Spec{
		Name:            t.Name,
		Plan:            plan,
		Schedule:        schedule,
		Month:           month,
		Seed:            t.Seed,
		Shift:           shift,
		AccountsPool:    t.AccountsPool,
		Schema:          t.Schema,
		Table:           t.Table,
		IDColumn:        t.IDColumn,
		Filter:          t.Filter,
		Weight:          t.Weight,
		WeightEpsilon:   t.WeightEpsilon,
		BatchSize:       t.BatchSize,
		LatePolicy:      t.LatePolicy,
		FirstCycle:      t.FirstCycle,
		LateGrace:       t.LateGrace,
		Upstream:        t.Upstream,
		Limits:          t.Limits,
		Lead:            t.Lead,
		TriggerLead:     triggerLead(t.Lead, plan.Cycle),
		PerSlotTimeout:  t.PerSlotTimeout,
		PinsTimeout:     t.PinsTimeout,
		DirectMax:       PinsDirectMax,
		SyncTimeout:     t.SyncTimeout,
		ControlQueue:    t.ControlQueue,
		ControlPriority: ControlPriority,
		SyncOpts:        river.InsertOpts{Queue: t.Queue, Priority: t.Priority, MaxAttempts: t.MaxAttempts},
	}
	spec.BuildSQL()
	return spec, nil
}

// resolveOpposites gives every task with OppositeOf the shift of its
// opposite plus half the slots, checking that the relation can hold.
func resolveOpposites(tasks []Config, byName map[string]*Spec, names string) []error {
	var errs []error
	for i, t := range tasks {
		if t.OppositeOf == "" {
			continue
		}
		prefix := fmt.Sprintf("Tasks[%d] %q: ", i, t.Name)
		spec, ok := byName[t.Name]
		if !ok {
			continue // invalid, reported already
		}
		other, ok := byName[t.OppositeOf]
		switch {
		case t.OppositeOf == t.Name:
			errs = append(errs, fmt.Errorf("%sOppositeOf names the task itself; name another task of this scheduler", prefix))
			continue
		case !ok:
			errs = append(errs, fmt.Errorf("%sOppositeOf %q is not a valid task of this scheduler; name one of %s", prefix, t.OppositeOf, names))
			continue
		case other.Plan.Cycle != spec.Plan.Cycle:
			errs = append(errs, fmt.Errorf("%sCycle must equal the Cycle of task %q (%s) to stay opposite it, got %s; give both tasks the same Cycle",
				prefix, other.Name, other.Plan.Cycle, spec.Plan.Cycle))
			continue
		case other.Plan.Buckets != spec.Plan.Buckets:
			errs = append(errs, fmt.Errorf("%sBuckets must equal the Buckets of task %q (%d) to stay opposite it, got %d; give both tasks the same Buckets",
				prefix, other.Name, other.Plan.Buckets, spec.Plan.Buckets))
			continue
		}
		for j, u := range tasks {
			if u.Name == t.OppositeOf && u.OppositeOf != "" {
				errs = append(errs, fmt.Errorf("%sOppositeOf %q, which is itself OppositeOf %q (Tasks[%d]); give one of the two a Phase instead", prefix, u.Name, u.OppositeOf, j))
			}
		}
		if other.Schedule.Offset != spec.Schedule.Offset || other.Schedule.Location.String() != spec.Schedule.Location.String() {
			errs = append(errs, fmt.Errorf("%sTriggerOffset and Location must equal those of task %q (%s, %s) to stay opposite it (its cycles start then), got %s, %s; give both tasks the same",
				prefix, other.Name, other.Schedule.Offset, other.Schedule.Location, spec.Schedule.Offset, spec.Schedule.Location))
			continue
		}
		if spec.AccountsPool != other.AccountsPool {
			errs = append(errs, fmt.Errorf("%sAccountsPool must be the AccountsPool of task %q to stay opposite it (it follows that task's pins, stored next to its accounts); give both tasks the same", prefix, other.Name))
			continue
		}
		if spec.Weighted() {
			errs = append(errs, fmt.Errorf("%sWeight cannot be set on a task that is OppositeOf another: it follows the placement of task %q (that task's pins shifted by half a cycle), so the two never meet on an account; remove Weight here and set it on %q", prefix, other.Name, other.Name))
			continue
		}
		if other.Weighted() {
			spec.PinsFrom = other
		}
		spec.Opposed, other.Opposed = true, true
		spec.Shift = spec.Plan.Shift(other.Shift, spec.Plan.Slots/2)
	}
	return errs
}

// MonthMin is the shortest calendar month (February, 28 days), a monthly
// task's bound where a fixed task's is its Cycle, and the month the row
// and rate estimates assume (the most syncs a second). A zone that changes
// its clocks in February makes it an hour shorter.
const MonthMin = 28 * 24 * time.Hour

// monthlyTask checks the fields of a calendar-month task (Monthly set),
// defaults its Buckets to 65,536 and its Location to UTC, and returns its
// plan (the longest month's shape), schedule and month layout. Fields a
// monthly task does not support are refused by add, naming the fix.
func monthlyTask(t *Config, add func(format string, args ...any)) (slotplan.Plan, slotplan.Schedule, *slotplan.Monthly) {
	if t.Cycle != 0 {
		add("Cycle must be 0 when Monthly is set (the cycle is the calendar month in Location), got %s; leave Cycle 0 or unset Monthly", t.Cycle)
	}
	t.Buckets = cmp.Or(t.Buckets, slotplan.BucketsTwoByte)
	if t.Buckets != slotplan.BucketsTwoByte {
		add("Buckets must be %d when Monthly is set (an account's place is a fraction of the month, its two UUID bytes the high part), got %d; leave it 0", slotplan.BucketsTwoByte, t.Buckets)
	}
	if t.TriggerOffset != 0 {
		add("TriggerOffset must be 0 when Monthly is set (a month starts at midnight of its first day in Location), got %s", t.TriggerOffset)
	}
	if t.Weight != "" {
		add("Weight cannot be set when Monthly is set (a monthly task places accounts by hash only); remove Weight or use a fixed Cycle")
	}
	if t.Phase != 0 || t.OppositeOf != "" {
		add("Phase and OppositeOf cannot be set when Monthly is set (a month's days have no fixed shift); remove them or use a fixed Cycle")
	}
	t.Location = cmp.Or(t.Location, time.UTC)
	month, _ := slotplan.NewMonthly(t.Location) // a location is set
	schedule, _ := slotplan.NewMonthlySchedule(t.Location)
	if t.Location.String() == "Local" {
		add("Location must be a named zone when Monthly is set (the plan id records its name, read back on every node), got time.Local; use time.LoadLocation(\"Europe/London\") or time.UTC")
	}
	return monthlyPlan, schedule, &month
}

// prefixErrors prefixes every error joined in err.
func prefixErrors(prefix string, err error) error {
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return fmt.Errorf("%s%w", prefix, err)
	}
	errs := joined.Unwrap()
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = fmt.Errorf("%s%w", prefix, e)
	}
	return errors.Join(out...)
}

// triggerLead is how long before a cycle start its trigger fires: the
// per-slot lead plus 10 s, so the bootstrap has run and slot 0's per-slot
// job is in the queue before River's scheduler has to promote it. Capped at
// half a cycle.
func triggerLead(lead, cycle time.Duration) time.Duration {
	return min(lead+10*time.Second, cycle/2)
}

// checkIdentifier rejects identifiers that are legal when quoted but almost
// certainly a mistake or an injection attempt. Identifiers are always quoted
// in SQL regardless.
func checkIdentifier(field, value string) error {
	if len(value) > 63 {
		return fmt.Errorf("%s must be at most 63 bytes (Postgres' identifier limit), got %d", field, len(value))
	}
	if strings.ContainsAny(value, "\";\x00") || strings.Contains(value, "--") {
		return fmt.Errorf("%s must be a plain identifier without quotes, ';' or '--' (it is quoted for you), got %q", field, value)
	}
	return nil
}
