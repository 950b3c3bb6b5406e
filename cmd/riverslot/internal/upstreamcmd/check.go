package upstreamcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
)

// CheckConfig is riverslot upstream check: the task as its flags give it,
// the pool it connected, and how long a sync's call takes.
type CheckConfig struct {
	// Pool is the database of the accounts table and of River's tables.
	Pool *pgxpool.Pool
	// RiverSchema is the schema of River's tables, where operators'
	// overrides of upstream limits live (--schema). Defaults to
	// search_path.
	RiverSchema string
	// Task is the task whose accounts are counted. Its Limits.Rate and
	// Limits.Concurrency are the limits of an upstream without an
	// override. Sync is not called and may be nil.
	Task riverslot.Task
	// Latency is how long one sync's call to its upstream takes
	// (--upstream-latency). With Concurrency syncs in flight at once, an
	// upstream serves at most Concurrency / Latency syncs a second.
	// Defaults to unknown: the limiter does not measure it (a lease
	// records when it expires, not how long the call took), so the
	// concurrency bound is not checked and the output says so.
	Latency time.Duration
}

// Bound names what limits an upstream's throughput (riverslot.BoundNone,
// BoundRate or BoundConcurrency).
type Bound = string

// The bounds, as the library names them.
const (
	BoundNone        Bound = riverslot.BoundNone
	BoundRate        Bound = riverslot.BoundRate
	BoundConcurrency Bound = riverslot.BoundConcurrency
)

// Budget is one upstream's accounts against what its limits let through:
// the rate limit, and the concurrency limit over the latency of a call.
type Budget struct {
	// Key is the upstream ("" the task's default).
	Key string
	// Accounts is how many accounts matching the task's Filter it has.
	Accounts int64
	// AverageRate is the rate the cycle needs of it (its accounts over
	// the cycle), NeedRate what its busiest slot needs (the slot's
	// accounts over the slot's length), in syncs a second.
	AverageRate, NeedRate float64
	// Rate is its rate limit (an operator's override, else the task's;
	// 0: none).
	Rate float64
	// Concurrency is its limit of syncs in flight (an operator's
	// override, else the task's; 0: none).
	Concurrency int
	// Latency is CheckConfig.Latency (0: unknown).
	Latency time.Duration
	// ConcurrencyRate is Concurrency / Latency, the most syncs a second
	// Concurrency lets through (0: no concurrency limit, or latency
	// unknown).
	ConcurrencyRate float64
	// Limit is what bounds its throughput: the lower of Rate and
	// ConcurrencyRate where set (0: none). Bound says which.
	Limit float64
	Bound Bound
	// Fits: AverageRate within Limit. An upstream that does not fit has
	// syncs skipped as upstream_throttled every cycle.
	Fits bool
	// OnTime: NeedRate within Limit too. One that fits but is not on
	// time has its busiest slot's syncs wait (for a place in line or a
	// lease), up to their NotAfter, later than their place.
	OnTime bool
}

// LatencyUnknown reports whether b has a concurrency limit that could not
// be weighed: no latency was given.
func (b *Budget) LatencyUnknown() bool { return b.Concurrency > 0 && b.Latency <= 0 }

// ConcurrencyFor returns the least Concurrency that carries rate syncs a
// second at b's latency: rate x Latency, rounded up (0 when the latency is
// unknown).
func (b *Budget) ConcurrencyFor(rate float64) int {
	if b.Latency <= 0 {
		return 0
	}
	// Less a hair: 12.5/s x 800ms is 10 in flight, not 11.
	return int(math.Ceil(rate*b.Latency.Seconds() - 1e-9))
}

// Check counts c.Task's accounts per upstream and slot (one scan of the
// accounts table, Scheduler.UpstreamBudgets) and weighs what each upstream
// needs, over the cycle and in its busiest slot, against what its limits
// let through: its Rate, and its Concurrency over c.Latency. Most needed
// first. A task the library refuses is an *inspect.InputError.
func Check(ctx context.Context, c *CheckConfig) ([]Budget, error) {
	task := c.Task
	task.Limits.Latency = c.Latency // the library weighs Concurrency at it
	counted, err := Budgets(ctx, c.Pool, c.RiverSchema, task)
	if err != nil {
		return nil, err
	}
	out := make([]Budget, len(counted))
	for i, u := range counted {
		out[i] = Budget{Key: u.Key, Accounts: u.Accounts, AverageRate: u.AverageRate, NeedRate: u.NeedRate,
			Rate: u.Rate, Concurrency: u.Concurrency, Latency: c.Latency, ConcurrencyRate: u.ConcurrencyRate,
			Limit: u.Limit, Bound: u.Bound, Fits: u.Fits, OnTime: u.OnTime}
	}
	return out, nil
}

// fixes says what lets b carry need syncs a second: each bound below it
// raised.
func (b *Budget) fixes(need float64) string {
	var fix []string
	if b.Rate > 0 && b.Rate < need {
		fix = append(fix, fmt.Sprintf("raise Rate to %.4g/s", need))
	}
	if b.ConcurrencyRate > 0 && b.ConcurrencyRate < need {
		fix = append(fix, fmt.Sprintf("raise Concurrency to %d", b.ConcurrencyFor(need)))
	}
	return strings.Join(fix, " and ")
}

// limits describes b's bounds: "rate 15/s; concurrency 2 x 800ms = 2.5/s".
func (b *Budget) limits() string {
	var parts []string
	if b.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %.4g/s", b.Rate))
	}
	switch {
	case b.ConcurrencyRate > 0:
		parts = append(parts, fmt.Sprintf("concurrency %d / %s a sync = %.4g/s", b.Concurrency, b.Latency, b.ConcurrencyRate))
	case b.Concurrency > 0:
		parts = append(parts, fmt.Sprintf("concurrency %d at an unknown latency", b.Concurrency))
	}
	return strings.Join(parts, ", ")
}

// WriteCheck prints budgets as a table (then what to change, and the
// upstreams whose concurrency limit could not be weighed) or as JSON, and
// returns an error naming the upstreams that cannot fit in a cycle, the
// bound that binds and what to raise.
func WriteCheck(w io.Writer, budgets []Budget, asJSON bool) error {
	var over, late, unknown []*Budget
	for i := range budgets {
		b := &budgets[i]
		switch {
		case !b.Fits:
			over = append(over, b)
		case !b.OnTime:
			late = append(late, b)
		}
		if b.LatencyUnknown() {
			unknown = append(unknown, b)
		}
	}
	if asJSON {
		if err := writeCheckJSON(w, budgets); err != nil {
			return err
		}
	} else if err := writeCheckTable(w, budgets, late, unknown); err != nil {
		return err
	}
	if len(over) == 0 {
		return nil
	}
	var msgs []string
	for _, b := range over {
		msgs = append(msgs, fmt.Sprintf("%q (%d accounts need %.4g/s; %s bound: %s; %s)", b.Key, b.Accounts, b.AverageRate, b.Bound, b.limits(), b.fixes(b.AverageRate)))
	}
	return fmt.Errorf("%d of %d upstreams cannot sync their accounts in a cycle at their limits: %s; raise the bound named (riverslot upstream set --key K --rate R or --concurrency C), lengthen the cycle, or accept that the excess is skipped as upstream_throttled every cycle",
		len(over), len(budgets), strings.Join(msgs, ", "))
}

// lateShown is how many late upstreams the table's footer names.
const lateShown = 10

func writeCheckTable(w io.Writer, budgets []Budget, late, unknown []*Budget) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tACCOUNTS\tNEEDS/S (CYCLE)\tNEEDS/S (BUSIEST SLOT)\tRATE/S\tCONCURRENCY\tLATENCY\tLIMIT/S\tBOUND\tFITS IN A CYCLE\tBUSIEST SLOT ON TIME")
	for _, b := range budgets {
		rate, concurrency, latency, limit := "none", "none", "unknown", "none"
		if b.Rate > 0 {
			rate = strconv.FormatFloat(b.Rate, 'g', 4, 64)
		}
		if b.Concurrency > 0 {
			concurrency = strconv.Itoa(b.Concurrency)
		}
		if b.Latency > 0 {
			latency = b.Latency.String()
		}
		if b.Limit > 0 {
			limit = strconv.FormatFloat(b.Limit, 'g', 4, 64)
		}
		fmt.Fprintf(tw, "%q\t%d\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Key, b.Accounts, b.AverageRate, b.NeedRate,
			rate, concurrency, latency, limit, b.Bound, yesNo(b.Fits), yesNo(b.OnTime))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(late) > 0 {
		fmt.Fprintf(w, "%d upstream(s) fit in a cycle but not in their busiest slot: their syncs wait (up to their NotAfter), later than their place\n", len(late))
		for i, b := range late {
			if i == lateShown {
				fmt.Fprintf(w, "  and %d more\n", len(late)-lateShown)
				break
			}
			fmt.Fprintf(w, "  %q: busiest slot needs %.4g/s, %s bound %.4g/s; on time: %s\n", b.Key, b.NeedRate, b.Bound, b.Limit, b.fixes(b.NeedRate))
		}
	}
	for i, b := range unknown {
		if i == lateShown {
			fmt.Fprintf(w, "  and %d more\n", len(unknown)-lateShown)
			break
		}
		if i == 0 {
			fmt.Fprintf(w, "latency unknown: give --upstream-latency (how long one sync's call takes; the limiter does not measure it): %d upstream(s) have a concurrency limit, which bounds them to Concurrency / latency syncs a second\n", len(unknown))
		}
		fmt.Fprintf(w, "  %q: Concurrency %d carries its busiest slot (%.4g/s) while a sync takes at most %s\n", b.Key, b.Concurrency, b.NeedRate, maxLatency(b.Concurrency, b.NeedRate))
	}
	return nil
}

// maxLatency is the longest call at which concurrency syncs in flight
// carry rate syncs a second.
func maxLatency(concurrency int, rate float64) string {
	if rate <= 0 {
		return "any time"
	}
	return time.Duration(float64(concurrency) / rate * float64(time.Second)).Round(time.Millisecond).String()
}

func writeCheckJSON(w io.Writer, budgets []Budget) error {
	type row struct {
		Key         string  `json:"key"`
		Accounts    int64   `json:"accounts"`
		AverageRate float64 `json:"average_rate"`
		NeedRate    float64 `json:"need_rate"`
		Rate        float64 `json:"rate_limit"`
		// Concurrency: 0 for none. Latency and ConcurrencyRate: null
		// when unknown (or, for the rate, no concurrency limit).
		Concurrency     int      `json:"concurrency"`
		Latency         *float64 `json:"latency_seconds"`
		ConcurrencyRate *float64 `json:"concurrency_rate"`
		LatencyUnknown  bool     `json:"latency_unknown"`
		Limit           float64  `json:"effective_rate"`
		Bound           Bound    `json:"bound"`
		Fits            bool     `json:"fits"`
		OnTime          bool     `json:"on_time"`
		// The least Concurrency that carries the cycle's and the
		// busiest slot's need at Latency (null: latency unknown).
		ForCycle *int `json:"concurrency_for_cycle"`
		ForSlot  *int `json:"concurrency_for_busiest_slot"`
	}
	rows := make([]row, 0, len(budgets))
	for i := range budgets {
		b := &budgets[i]
		r := row{Key: b.Key, Accounts: b.Accounts, AverageRate: b.AverageRate, NeedRate: b.NeedRate, Rate: b.Rate,
			Concurrency: b.Concurrency, LatencyUnknown: b.LatencyUnknown(), Limit: b.Limit, Bound: b.Bound, Fits: b.Fits, OnTime: b.OnTime}
		if b.Latency > 0 {
			r.Latency = ptr(b.Latency.Seconds())
			r.ForCycle, r.ForSlot = ptr(b.ConcurrencyFor(b.AverageRate)), ptr(b.ConcurrencyFor(b.NeedRate))
		}
		if b.ConcurrencyRate > 0 {
			r.ConcurrencyRate = ptr(b.ConcurrencyRate)
		}
		rows = append(rows, r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}

func ptr[T any](v T) *T { return &v }
