package main

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/plancmd"
	"github.com/riverslot/riverslot/slotplan"
)

const planMonthlyAbout = `With --cycle monthly, prints a calendar month's slots (its days in
--location, each with the range of the 65,536 buckets whose accounts may be
due that day) and, with --account, the account's place in every month (a
fixed fraction of the month) and its next calls month by month.`

// monthlyCycle reports whether args ask plan for a monthly cycle.
func monthlyCycle(args []string) bool {
	for i, a := range args {
		switch {
		case a == "--" || a == "-":
			return false
		case a == "--cycle=monthly" || a == "-cycle=monthly":
			return true
		case (a == "--cycle" || a == "-cycle") && i+1 < len(args) && args[i+1] == "monthly":
			return true
		}
	}
	return false
}

// runPlanMonthly is plan --cycle monthly.
func runPlanMonthly(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan --cycle monthly", planMonthlyAbout, stderr)
	fs.String("cycle", "monthly", "monthly: once per calendar month in --location")
	location := fs.String("location", "UTC", "IANA time zone of the months, e.g. Europe/London")
	account := fs.String("account", "", "account UUID: print its place in the month and its next calls")
	task := fs.String("task", "transactions", "task name; the default offset seed is derived from it, as in the library")
	seed := fs.Uint64("seed", 0, "offset seed; 0 means derived from --task, as in the library")
	now := fs.String("now", "", "RFC 3339 time to compute the month and the next calls from (default: the current time)")
	months := fs.Int("months", 3, "how many of the account's next calls to print, one per month (1 to 120)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	loc, err := time.LoadLocation(*location)
	if err != nil || *location == "" || strings.EqualFold(*location, "local") {
		return usageErr("--location must be an IANA time zone such as Europe/London or UTC, got %q", *location)
	}
	at, id, s, err := planInputs(*now, *account, *task, *seed)
	if err != nil {
		return err
	}
	if *months < 1 || *months > 120 {
		return usageErr("--months must be between 1 and 120, got %d", *months)
	}
	m, err := slotplan.NewMonthly(loc)
	if err != nil {
		return usageErr("--location: %v", err)
	}
	c := &plancmd.MonthlyConfig{Months: m, Now: at, Seed: s, Calls: *months}
	if *account != "" {
		c.Account = &id
	}
	return plancmd.RunMonthly(c, stdout)
}
