package upstreamcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
)

// Budgets counts task's accounts per upstream in the database of pool and
// compares the rate each needs with its limit (Scheduler.UpstreamBudgets),
// operators' overrides read from River's tables in riverSchema ("":
// search_path). task.Sync is not called and may be nil; a task the library
// refuses is an *inspect.InputError.
func Budgets(ctx context.Context, pool *pgxpool.Pool, riverSchema string, task riverslot.Task) ([]riverslot.UpstreamBudget, error) {
	scheduler, err := inspect.Scheduler(pool, "", riverSchema, task)
	if err != nil {
		return nil, err
	}
	return scheduler.UpstreamBudgets(ctx, task.Name)
}

// WriteBudgets prints budgets as a table or JSON, and returns an error
// naming the upstreams that cannot fit in a cycle.
func WriteBudgets(w io.Writer, budgets []riverslot.UpstreamBudget, asJSON bool) error {
	var over []string
	late := 0
	for _, b := range budgets {
		if !b.Fits {
			over = append(over, fmt.Sprintf("%q (%d accounts need %.3g/s, limit %.3g/s)", b.Key, b.Accounts, b.AverageRate, b.Rate))
		} else if !b.OnTime {
			late++
		}
	}
	if asJSON {
		type row struct {
			Key         string  `json:"key"`
			Accounts    int64   `json:"accounts"`
			AverageRate float64 `json:"average_rate"`
			NeedRate    float64 `json:"need_rate"`
			Rate        float64 `json:"rate_limit"`
			Fits        bool    `json:"fits"`
			OnTime      bool    `json:"on_time"`
		}
		rows := make([]row, 0, len(budgets))
		for _, b := range budgets {
			rows = append(rows, row{b.Key, b.Accounts, b.AverageRate, b.NeedRate, b.Rate, b.Fits, b.OnTime})
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "UPSTREAM\tACCOUNTS\tNEEDS/S (CYCLE)\tNEEDS/S (BUSIEST SLOT)\tLIMIT/S\tFITS IN A CYCLE\tBUSIEST SLOT ON TIME")
		for _, b := range budgets {
			limit := "none"
			if b.Rate > 0 {
				limit = strconv.FormatFloat(b.Rate, 'g', 4, 64)
			}
			fmt.Fprintf(tw, "%q\t%d\t%.3f\t%.3f\t%s\t%s\t%s\n", b.Key, b.Accounts, b.AverageRate, b.NeedRate, limit, yesNo(b.Fits), yesNo(b.OnTime))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if late > 0 {
			fmt.Fprintf(w, "%d upstream(s) fit in a cycle but not in their busiest slot: their syncs wait in line (up to their NotAfter), later than their place\n", late)
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("%d of %d upstreams cannot sync their accounts in a cycle at their rate limit: %s; raise their rate (riverslot upstream set --key K --rate R), lengthen the cycle, or accept that the excess is skipped as upstream_throttled every cycle",
			len(over), len(budgets), strings.Join(over, ", "))
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}
