package main

import (
	"flag"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/riverslot/riverslot/slotplan"
)

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("riverslot "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
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

// cycleMax is the longest cycle the demo and the worker accept: River
// deletes completed jobs after 24h (river.Config.CompletedJobRetentionPeriod's
// default, which they keep), and riverslot's one-run-per-cycle uniqueness
// holds only while a cycle's jobs are kept.
const cycleMax = 24 * time.Hour

// checkCycle validates a --cycle flag (or another flag naming a cycle).
func checkCycle(flagName string, cycle time.Duration) error {
	if _, err := slotplan.New(cycle); err != nil {
		return usageErr("%s: %v", flagName, err)
	}
	if cycle > cycleMax {
		return usageErr("%s must be at most %s, got %s: River deletes completed jobs after 24h "+
			"(its default CompletedJobRetentionPeriod) and riverslot's one-run-per-cycle uniqueness holds only while "+
			"a cycle's jobs are kept, so a longer cycle could be run twice; use a cycle of 24h or less", flagName, cycleMax, cycle)
	}
	return nil
}

// taskNameRE mirrors riverutil.Task.Name's rule, so a bad --task is refused
// before the demo prepares its schema (riverutil checks it again).
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
