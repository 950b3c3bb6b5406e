package plancmd

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/riverslot/riverslot/slotplan"
)

// MonthlyConfig is what riverslot plan --cycle monthly prints: the values of
// its flags, which the command validates as it parses them.
type MonthlyConfig struct {
	// Months are the calendar months of the cycle (--location).
	Months slotplan.Monthly
	// Now is the time the month and the next calls are computed from.
	Now time.Time
	// Account is the account whose place and next calls to print
	// (--account). Defaults to none: the month's slots only.
	Account *uuid.UUID
	// Seed is the seed of the accounts' places in the month.
	Seed uint64
	// Calls is how many of the account's next calls to print, one per
	// month (--months).
	Calls int
}

// RunMonthly prints the current month's slots (its days, each with the
// range of the buckets whose accounts may be due that day) and, with
// MonthlyConfig.Account, the account's place and next calls, to w.
func RunMonthly(c *MonthlyConfig, w io.Writer) error {
	m, at, s := c.Months, c.Now, c.Seed
	start := m.MonthStart(at)
	next := m.NextMonth(start)
	days := m.Days(start)
	fmt.Fprintf(w, "cycle          monthly: calendar months in %s (%d buckets)\n", m.Location(), slotplan.BucketsTwoByte)
	fmt.Fprintf(w, "month          %s: %d days, %s, from %s\n", start.Format("2006-01"), days, next.Sub(start), start.Format(time.RFC3339))
	fmt.Fprintf(w, "next month     %s\n", next.Format(time.RFC3339))
	fmt.Fprintf(w, "slots          the month's %d days; an account's place is a fixed fraction of the month\n\n", days)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "slot\tday\tstarts\tlength\tbuckets")
	for d := range days {
		lo, hi := m.DayBuckets(start, d)
		from, to := m.DayStart(start, d), m.DayStart(start, d+1)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d-%d\n", d, from.Format("Mon 02"), from.Format(time.RFC3339), to.Sub(from), lo, hi)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c.Account == nil {
		return nil
	}
	id := *c.Account
	f := slotplan.Fraction(s, id)
	fmt.Fprintf(w, "\naccount        %s\n", id)
	fmt.Fprintf(w, "bucket         %d of %d\n", slotplan.BucketOf(id, slotplan.BucketsTwoByte), slotplan.BucketsTwoByte)
	fmt.Fprintf(w, "place          %.9f of each month (seed %d)\n", float64(f)/(1<<64), s)
	fmt.Fprintln(w, "next calls")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for month, shown := start, 0; shown < c.Calls; month = m.NextMonth(month) {
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
