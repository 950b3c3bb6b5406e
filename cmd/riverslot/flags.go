package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/slotplan"
)

// newFlagSet returns a command's flag set; its -h prints about (what the
// command does) and then the flags.
func newFlagSet(name, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("riverslot "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: riverslot %s [flags]\n\n%s\nflags:\n", name, about)
		fs.PrintDefaults()
	}
	return fs
}

// durationValue is a flag.Value for durations whose parse error says how
// to write one: flag's own says only "parse error".
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		hint := ""
		if strings.HasSuffix(s, "d") {
			hint = " (days are not a unit: 24h is a day)"
		}
		return fmt.Errorf("%q is not a duration%s; write a number with a unit of s, m or h, e.g. 24h, 90m, 120s", s, hint)
	}
	*d = durationValue(v)
	return nil
}

// durationVar defines a duration flag whose bad value gets a clear error.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

// durationFlag is durationVar returning the variable.
func durationFlag(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	durationVar(fs, p, name, value, usage)
	return p
}

// parseFlags turns flag errors into exit-2 errors; -h exits 0.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return &exitError{code: 0}
		}
		return &exitError{code: 2} // flag package already printed the problem
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// cycleMax is the longest cycle the demo, the worker and the bench accept:
// they run compressed cycles and wait for them to finish. The library
// accepts longer cycles (Scheduler.Configure keeps River's completed jobs
// long enough for them).
const cycleMax = 24 * time.Hour

// checkCycle validates a --cycle flag (or another flag naming a cycle).
func checkCycle(flagName string, cycle time.Duration) error {
	if err := checkCycleMin(flagName, cycle); err != nil {
		return err
	}
	if _, err := slotplan.New(cycle); err != nil {
		return usageErr("%s: %v", flagName, err)
	}
	if cycle > cycleMax {
		return usageErr("%s must be at most %s, got %s: this command runs compressed cycles and waits for them to finish; "+
			"use a cycle of 24h or less (the library itself accepts longer cycles)", flagName, cycleMax, cycle)
	}
	return nil
}

// checkCycleMin refuses a cycle shorter than the library's minimum,
// riverslot.CycleMin; checked before slotplan.New, whose own minimum (2 s)
// is lower.
func checkCycleMin(flagName string, cycle time.Duration) error {
	if cycle < riverslot.CycleMin {
		return usageErr("%s must be at least %s, got %s: River's scheduler promotes jobs every 5 s, so the slots of a shorter cycle cannot start on time; use e.g. 16s (16 slots of 1s) or 120s (8 slots of 15s)",
			flagName, riverslot.CycleMin, cycle)
	}
	return nil
}

// taskNameRE mirrors riverslot.Task.Name's rule, so a bad --task is refused
// before the demo prepares its schema (riverslot checks it again).
var taskNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func checkTaskName(name string) error {
	if !taskNameRE.MatchString(name) {
		return usageErr("--task must be 1-64 letters, digits, '_', '-' or '.', got %q", name)
	}
	return nil
}

// checkSchemaName validates a --schema-like flag: Postgres truncates longer
// identifiers silently, and pg_ names are reserved for system schemas.
func checkSchemaName(flagName, schema string) error {
	switch {
	case schema == "" || len(schema) > 63:
		return usageErr("%s must be 1-63 bytes (Postgres' identifier limit), got %q", flagName, schema)
	case strings.ContainsAny(schema, "\";\x00") || strings.Contains(schema, "--"):
		return usageErr("%s must be a plain identifier without quotes, ';' or '--' (it is quoted for you), got %q", flagName, schema)
	case strings.HasPrefix(schema, "pg_"):
		return usageErr("%s must not start with pg_ (reserved for Postgres' system schemas), got %q", flagName, schema)
	}
	return nil
}

// databaseURLFlag adds --database-url, read the same way by every command:
// the flag, else $DATABASE_URL, else fallback (the local database that the
// command's make target prepares). The default is resolved after parsing, so
// -h never prints a URL (nor a password taken from $DATABASE_URL).
func databaseURLFlag(fs *flag.FlagSet, fallback, makeTarget string) func() string {
	v := fs.String("database-url", "", "PostgreSQL URL; default $DATABASE_URL, else "+fallback+" (the database that make "+makeTarget+" prepares)")
	return func() string { return cmp.Or(*v, os.Getenv("DATABASE_URL"), fallback) }
}

// logLevelFlag adds --log-level: the level of River's own log lines. River
// logs at info every few seconds per node; warn keeps the output readable.
func logLevelFlag(fs *flag.FlagSet) *slog.Level {
	level := new(slog.Level)
	fs.TextVar(level, "log-level", slog.LevelWarn, "`level` of River's log lines: debug, info, warn or error (River logs at info every few seconds per node)")
	return level
}

// taskFlags describe one riverslot task as an app configures it, over an
// existing schema: the flags worker and status share.
type taskFlags struct {
	fs                                          *flag.FlagSet
	schema, accountsSchema, table, filter, task *string
	weight, location                            *string
	cycle                                       *cycleValue
	offset                                      *time.Duration
	buckets                                     *int
	seed                                        *uint64
	phase                                       *float64
	loc                                         *time.Location // --location, loaded by check
}

// cycleValue is --cycle: a duration, or monthly (calendar months in
// --location, Task.Monthly).
type cycleValue struct {
	d       time.Duration
	monthly bool
}

func (c *cycleValue) String() string {
	if c == nil {
		return ""
	}
	if c.monthly {
		return "monthly"
	}
	return c.d.String()
}

func (c *cycleValue) Set(s string) error {
	if s == "monthly" {
		*c = cycleValue{monthly: true}
		return nil
	}
	var d durationValue
	if err := d.Set(s); err != nil {
		return fmt.Errorf("%w, or monthly (calendar months in --location)", err)
	}
	*c = cycleValue{d: time.Duration(d)}
	return nil
}

// given reports whether the command line set the flag name.
func (f *taskFlags) given(name string) bool {
	found := false
	f.fs.Visit(func(fl *flag.Flag) { found = found || fl.Name == name })
	return found
}

func addTaskFlags(fs *flag.FlagSet) *taskFlags {
	cycle := &cycleValue{d: 120 * time.Second}
	fs.Var(cycle, "cycle", "the task's Cycle: a whole number of seconds, a multiple of 2s, 16s to 24h (default 120s); or monthly, a calendar month in --location (Task.Monthly)")
	return &taskFlags{
		fs:             fs,
		cycle:          cycle,
		schema:         fs.String("schema", "riverslot_demo", "schema of River's tables (and of the accounts table unless --accounts-schema is set)"),
		accountsSchema: fs.String("accounts-schema", "", "schema of the accounts table (default: --schema)"),
		table:          fs.String("table", "accounts", "accounts table, with a uuid column id"),
		filter:         fs.String("filter", "active", "the task's Filter: SQL boolean expression over the accounts table (empty: every row)"),
		task:           fs.String("task", "demo", "task name"),
		weight:         fs.String("weight", "", "the task's Weight: numeric SQL expression over the accounts table (empty: hash placement only)"),
		location:       fs.String("location", "", "with --cycle monthly: the IANA time zone of the months (Task.Location), e.g. Europe/London (default UTC)"),
		offset:         fs.Duration("trigger-offset", 0, "the task's TriggerOffset: cycle grid offset from the Unix epoch, in [0, --cycle)"),
		buckets:        fs.Int("buckets", slotplan.Buckets, "the task's Buckets: 256 (last UUID byte) or 65536 (last two bytes, finer slots)"),
		seed:           fs.Uint64("seed", 0, "the task's Seed: the seed of the accounts' offsets in their slots (0: derived from --task, as in the library)"),
		phase:          fs.Float64("phase", 0, "the task's Phase: a fraction of the cycle in [0, 1), a whole number of slots (its slots shift by phase x slots)"),
	}
}

// check validates the flags and defaults --accounts-schema to --schema.
func (f *taskFlags) check() error {
	if f.cycle.monthly {
		if err := f.checkMonthly(); err != nil {
			return err
		}
	} else if *f.location != "" {
		return usageErr("--location names the time zone of a calendar-month task: give it with --cycle monthly, or leave it out")
	} else if err := checkCycle("--cycle", f.cycle.d); err != nil {
		return err
	}
	if *f.buckets != slotplan.Buckets && *f.buckets != slotplan.BucketsTwoByte {
		return usageErr("--buckets must be %d or %d (Task.Buckets), got %d", slotplan.Buckets, slotplan.BucketsTwoByte, *f.buckets)
	}
	if !(*f.phase >= 0 && *f.phase < 1) { // NaN too
		return usageErr("--phase must be in [0, 1) (a fraction of the cycle, Task.Phase), got %g", *f.phase)
	}
	if plan, err := slotplan.NewBuckets(f.cycle.d, *f.buckets); err == nil && !f.cycle.monthly {
		if x := *f.phase * float64(plan.Slots); math.Abs(x-math.Round(x)) > 1e-9 {
			return usageErr("--phase must be a whole number of slots: %g x %d slots = %g; use a multiple of 1/%d", *f.phase, plan.Slots, x, plan.Slots)
		}
	}
	if err := checkSchemaName("--schema", *f.schema); err != nil {
		return err
	}
	if *f.accountsSchema == "" {
		*f.accountsSchema = *f.schema
		return nil
	}
	return checkSchemaName("--accounts-schema", *f.accountsSchema)
}

// checkMonthly checks the flags of --cycle monthly and loads --location.
func (f *taskFlags) checkMonthly() error {
	switch {
	case f.given("trigger-offset"):
		return usageErr("--trigger-offset does not apply to --cycle monthly: a month starts at local midnight of its first day in --location")
	case f.given("phase"):
		return usageErr("--phase does not apply to --cycle monthly: an account's place is a fixed fraction of each month")
	case f.given("buckets") && *f.buckets != slotplan.BucketsTwoByte:
		return usageErr("--buckets does not apply to --cycle monthly: a calendar-month task always uses the 65,536 two-byte buckets")
	}
	name := cmp.Or(*f.location, "UTC")
	loc, err := time.LoadLocation(name)
	if err != nil || strings.EqualFold(name, "local") {
		return usageErr("--location must be an IANA time zone such as Europe/London or UTC, got %q", name)
	}
	f.loc = loc
	return nil
}

// riverTask is the task the flags describe.
func (f *taskFlags) riverTask() riverslot.Task {
	t := riverslot.Task{
		Name: *f.task, Cycle: f.cycle.d, TriggerOffset: *f.offset, Buckets: *f.buckets, Seed: *f.seed, Phase: *f.phase,
		Schema: *f.accountsSchema, Table: *f.table, Filter: *f.filter, Weight: *f.weight,
	}
	if f.cycle.monthly {
		t.Cycle, t.Buckets, t.Monthly, t.Location = 0, 0, true, f.loc
	}
	return t
}

// checkSVGPath refuses, before anything runs, an --svg path whose directory
// does not exist.
func checkSVGPath(path string) error {
	if filepath.Ext(path) != ".svg" {
		return usageErr("--svg %q must end in .svg", path)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return usageErr("--svg %q: directory %q does not exist; create it or write the file elsewhere", path, dir)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return usageErr("--svg %q is a directory; give a file name", path)
	}
	return nil
}
