package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

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

	start := m.MonthStart(at)
	next := m.NextMonth(start)
	days := m.Days(start)
	fmt.Fprintf(stdout, "cycle          monthly: calendar months in %s (%d buckets)\n", loc, slotplan.BucketsTwoByte)
	fmt.Fprintf(stdout, "month          %s: %d days, %s, from %s\n", start.Format("2006-01"), days, next.Sub(start), start.Format(time.RFC3339))
	fmt.Fprintf(stdout, "next month     %s\n", next.Format(time.RFC3339))
	fmt.Fprintf(stdout, "slots          the month's %d days; an account's place is a fixed fraction of the month\n\n", days)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "slot\tday\tstarts\tlength\tbuckets")
	for d := range days {
		lo, hi := m.DayBuckets(start, d)
		from, to := m.DayStart(start, d), m.DayStart(start, d+1)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d-%d\n", d, from.Format("Mon 02"), from.Format(time.RFC3339), to.Sub(from), lo, hi)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if *account == "" {
		return nil
	}
	f := slotplan.Fraction(s, id)
	fmt.Fprintf(stdout, "\naccount        %s\n", id)
	fmt.Fprintf(stdout, "bucket         %d of %d\n", slotplan.BucketOf(id, slotplan.BucketsTwoByte), slotplan.BucketsTwoByte)
	fmt.Fprintf(stdout, "place          %.9f of each month (seed %d)\n", float64(f)/(1<<64), s)
	fmt.Fprintln(stdout, "next calls")
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for month, shown := start, 0; shown < *months; month = m.NextMonth(month) {
		due := m.Target(month, s, id)
		if !due.After(at) {
			continue // this month's call is past
		}
		d := m.DayOf(month, s, id)
		fmt.Fprintf(tw, "  %s\t%s\tslot %d (day %d of %d)\t%s into the month\n", month.Format("2006-01"), due.Format(time.RFC3339), d, d+1, m.Days(month), due.Sub(month).Round(time.Second))
		shown++
	}
	return tw.Flush()
}
