package taskspec

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/riverslot/riverslot/slotplan"
)

// PlanKey identifies a plan: what a task's cycles are made of (cycle,
// slots, bucket count, seed and shift). It is the one typed form of a plan:
// written as its String (the plan id, e.g. "86400s/128/<seed>") into
// bootstrap and per-slot job args, the ledger and the sync jobs' tags, and
// read back with ParsePlanKey (JSON args through UnmarshalText, ledger rows
// through Scan), the one parser. The zero PlanKey is "no plan" (jobs made
// before plans were recorded).
//
// A plan id this version cannot read (a later version's) still decodes,
// from job args or a ledger row, into a key that keeps its text and whose
// Err says why: the job that carries it is cancelled with that reason
// (ForPlan returns it) rather than failing to decode.
type PlanKey struct {
	Cycle   time.Duration
	Slots   int
	Buckets int
	Seed    uint64
	Shift   int

	// Month is the time zone (its IANA name, "UTC" for UTC) of a
	// calendar-month plan, written "monthly/<seed>/<zone>"; Cycle, Slots
	// and Shift are then zero and Buckets is 65,536. Empty for a plan of
	// a fixed Cycle.
	Month string

	unreadable string // the id, when it could not be read
}

// Err returns why the key's plan id could not be read, or nil.
func (k PlanKey) Err() error {
	if k.unreadable == "" {
		return nil
	}
	_, err := ParsePlanKey(k.unreadable)
	return err
}

// ErrPlanID is wrapped by the errors of ParsePlanKey: a plan id this
// version cannot read (a later version's, or a damaged row).
var ErrPlanID = errors.New("unreadable plan id")

// KeyOf returns the key of plan with seed and shift.
func KeyOf(plan slotplan.Plan, seed uint64, shift int) PlanKey {
	return PlanKey{Cycle: plan.Cycle, Slots: plan.Slots, Buckets: cmp0(plan.Buckets, slotplan.Buckets), Seed: seed, Shift: shift}
}

// MonthKey returns the key of the calendar-month plan in the zone named
// zone (65,536 buckets) with seed.
func MonthKey(zone string, seed uint64) PlanKey {
	return PlanKey{Buckets: slotplan.BucketsTwoByte, Seed: seed, Month: zone}
}

// monthPrefix starts the id of a calendar-month plan.
const monthPrefix = "monthly/"

func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// IsZero reports whether k is the zero key (no plan).
func (k PlanKey) IsZero() bool { return k == PlanKey{} }

// String returns the plan id: "<seconds>s/<slots>/<seed, 16 hex digits>",
// then "/b<buckets>" when not 256 and "/+<shift>" when not 0; "" for the
// zero key.
func (k PlanKey) String() string {
	if k.unreadable != "" {
		return k.unreadable
	}
	if k.IsZero() {
		return ""
	}
	if k.Month != "" {
		return monthPrefix + fmt.Sprintf("%016x", k.Seed) + "/" + k.Month
	}
	id := strconv.FormatInt(int64(k.Cycle/time.Second), 10) + "s/" + strconv.Itoa(k.Slots) + "/" + fmt.Sprintf("%016x", k.Seed)
	if k.Buckets != 0 && k.Buckets != slotplan.Buckets {
		id += "/b" + strconv.Itoa(k.Buckets)
	}
	if k.Shift != 0 {
		id += "/+" + strconv.Itoa(k.Shift)
	}
	return id
}

// ParsePlanKey parses a plan id written by PlanKey.String and checks that
// it names a plan riverslot can run: the cycle and bucket count make the
// slots it says, and the shift is one of them. "" is the zero key.
func ParsePlanKey(id string) (PlanKey, error) {
	if id == "" {
		return PlanKey{}, nil
	}
	if rest, ok := strings.CutPrefix(id, monthPrefix); ok {
		return parseMonthKey(id, rest)
	}
	const form = "<seconds>s/<slots>/<seed>[/b<buckets>][/+<shift>]"
	parts := strings.Split(id, "/")
	if len(parts) < 3 || len(parts) > 5 || !strings.HasSuffix(parts[0], "s") {
		return PlanKey{}, fmt.Errorf("%w: plan id %q is not of the form %s", ErrPlanID, id, form)
	}
	secs, err1 := strconv.ParseInt(strings.TrimSuffix(parts[0], "s"), 10, 64)
	slots, err2 := strconv.Atoi(parts[1])
	seed, err3 := strconv.ParseUint(parts[2], 16, 64)
	buckets, shift := slotplan.Buckets, 0
	rest := parts[3:]
	var err4, err5 error
	if len(rest) > 0 && strings.HasPrefix(rest[0], "b") {
		buckets, err4 = strconv.Atoi(rest[0][1:])
		rest = rest[1:]
	}
	switch {
	case len(rest) > 1:
		err5 = errors.New("too many parts")
	case len(rest) == 1 && !strings.HasPrefix(rest[0], "+"):
		err5 = errors.New("the shift must start with '+'")
	case len(rest) == 1:
		shift, err5 = strconv.Atoi(rest[0][1:])
	}
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return PlanKey{}, fmt.Errorf("%w: plan id %q is not of the form %s: %w", ErrPlanID, id, form, err)
	}
	k := PlanKey{Cycle: time.Duration(secs) * time.Second, Slots: slots, Buckets: buckets, Seed: seed, Shift: shift}
	if _, err := k.plan(id); err != nil {
		return PlanKey{}, fmt.Errorf("%w: %w", ErrPlanID, err)
	}
	if canonical := k.String(); canonical != id {
		// The ledger and the unique keys of jobs hold plan ids as text:
		// a key must write back exactly what it was read from.
		return PlanKey{}, fmt.Errorf("%w: plan id %q is not written as riverslot writes it (%q)", ErrPlanID, id, canonical)
	}
	return k, nil
}

// parseMonthKey parses rest, "<seed>/<zone>", of the calendar-month plan
// id id.
func parseMonthKey(id, rest string) (PlanKey, error) {
	const form = "monthly/<seed>/<zone>"
	hex, zone, ok := strings.Cut(rest, "/")
	seed, err := strconv.ParseUint(hex, 16, 64)
	if !ok || err != nil || len(hex) != 16 || zone == "" {
		return PlanKey{}, fmt.Errorf("%w: plan id %q is not of the form %s", ErrPlanID, id, form)
	}
	if _, err := time.LoadLocation(zone); err != nil {
		return PlanKey{}, fmt.Errorf("%w: plan id %q names a time zone this node cannot load (%w); install the zone database (tzdata) or import time/tzdata", ErrPlanID, id, err)
	}
	return MonthKey(zone, seed), nil
}

// Location returns the time zone of a calendar-month plan.
func (k PlanKey) Location() (*time.Location, error) {
	if k.Month == "" {
		return nil, fmt.Errorf("plan id %q is not a calendar-month plan", k)
	}
	return time.LoadLocation(k.Month)
}

// Plan returns the slot plan k names, checking that its cycle and bucket
// count make its slots and that its shift is one of them.
func (k PlanKey) Plan() (slotplan.Plan, error) { return k.plan(k.String()) }

// plan is Plan with errors naming the plan id as id.
func (k PlanKey) plan(id string) (slotplan.Plan, error) {
	if k.Month != "" {
		return monthlyPlan, nil
	}
	plan, err := slotplan.NewBuckets(k.Cycle, k.Buckets)
	if err != nil {
		return slotplan.Plan{}, fmt.Errorf("plan id %q: %w", id, err)
	}
	if plan.Slots != k.Slots {
		return slotplan.Plan{}, fmt.Errorf("plan id %q: a %s cycle of %d buckets has %d slots, not %d", id, k.Cycle, k.Buckets, plan.Slots, k.Slots)
	}
	if k.Shift < 0 || k.Shift >= k.Slots {
		return slotplan.Plan{}, fmt.Errorf("plan id %q: shift %d out of [0, %d)", id, k.Shift, k.Slots)
	}
	return plan, nil
}

// MarshalText writes the plan id (job args hold it as a JSON string).
func (k PlanKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses a plan id; one it cannot read gives a key whose
// Err says why.
func (k *PlanKey) UnmarshalText(b []byte) error {
	parsed, err := ParsePlanKey(string(b))
	if err != nil {
		parsed = PlanKey{unreadable: string(b)}
	}
	*k = parsed
	return nil
}

// Value writes the plan id into a text column (the ledger's plan).
func (k PlanKey) Value() (driver.Value, error) { return k.String(), nil }

// Scan reads a plan id from a text column, as UnmarshalText.
func (k *PlanKey) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*k = PlanKey{}
		return nil
	case string:
		return k.UnmarshalText([]byte(v))
	case []byte:
		return k.UnmarshalText(v)
	}
	return fmt.Errorf("cannot scan %T into a plan key", src)
}
