package riverslot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/upstream"
	"github.com/riverslot/riverslot/sqlbucket"
)

// UpstreamOverride changes one upstream's limits at run time
// (Scheduler.SetUpstreamLimits): a nil field keeps the current override.
type UpstreamOverride struct {
	// Rate overrides Limits.Rate for the key; 0 lifts the limit.
	Rate *float64
	// Burst overrides Limits.Burst for the key.
	Burst *int
	// Concurrency overrides Limits.Concurrency for the key; 0 lifts the
	// limit.
	Concurrency *int
	// Clear drops every override of the key: the task's Limits apply
	// again.
	Clear bool
}

// UpstreamState is one upstream of a task as the limiter holds it
// (Scheduler.Upstreams): the operator's overrides, the breaker, syncs in
// flight and waiting in line, and counters since the upstream's first
// sync.
type UpstreamState struct {
	Task string `json:"task"`
	Key  string `json:"key"`
	// Rate, Burst and Concurrency are the operator's overrides (nil: the
	// task's Limits apply).
	Rate        *float64 `json:"rate_override"`
	Burst       *int     `json:"burst_override"`
	Concurrency *int     `json:"concurrency_override"`
	// Breaker is "closed", "open" or "half_open"; OpenUntil is when an
	// open breaker lets a probe through; PausedUntil when a throttle
	// (Throttled, a 429) ends.
	Breaker     string     `json:"breaker"`
	OpenUntil   *time.Time `json:"open_until,omitempty"`
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// Failures counts consecutive failed syncs.
	Failures int `json:"failures"`
	// InFlight is the syncs holding a lease now, Waiting those holding a
	// place in the rate limiter's line.
	InFlight int `json:"in_flight"`
	Waiting  int `json:"waiting"`
	// RateNow is calls a second over the last window of about 10 s.
	RateNow float64 `json:"rate_now"`
	// Counters since the key's first sync: calls made, failed, throttled;
	// syncs deferred by an open breaker, skipped, breaker probes, and
	// times the breaker opened.
	Calls     int64     `json:"calls"`
	Failed    int64     `json:"failed"`
	Throttled int64     `json:"throttled"`
	Deferred  int64     `json:"deferred"`
	Skipped   int64     `json:"skipped"`
	Probes    int64     `json:"probes"`
	Opens     int64     `json:"opens"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SetUpstreamLimits overrides the limits of the task's upstream key, in
// River's database: every node's next decision for a sync of that
// upstream reads it, no deploy needed. The key need not have synced yet.
// Call it after Configure (it needs River's schema).
func (s *Scheduler) SetUpstreamLimits(ctx context.Context, taskName, key string, o UpstreamOverride) error {
	if _, err := s.spec(taskName); err != nil {
		return err
	}
	return upstream.New(s.riverSchema).Set(ctx, s.pool, taskName, key, upstream.Override(o))
}

// Upstreams returns the task's upstreams that synced or were given limits,
// by key, at most limit (1,000 when below 2) after the key after ("" for
// the first page, which starts with the default upstream ""): a
// page of a list that may hold thousands.
func (s *Scheduler) Upstreams(ctx context.Context, taskName, after string, limit int) ([]UpstreamState, error) {
	if _, err := s.spec(taskName); err != nil {
		return nil, err
	}
	if limit < 2 {
		limit = 1000
	}
	states, err := upstream.New(s.riverSchema).List(ctx, s.pool, taskName, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]UpstreamState, len(states))
	for i, st := range states {
		out[i] = UpstreamState(st)
	}
	return out, nil
}

// UpstreamBudget is one upstream's accounts per cycle against what its
// limits let through, as UpstreamBudgets counts them: its Rate, and its
// Concurrency over Limits.Latency.
type UpstreamBudget struct {
	// Key is the upstream ("" the task's default).
	Key string
	// Accounts is how many accounts matching Filter it has (with Sampled,
	// an estimate scaled up from a sample of the table).
	Accounts int64
	// AverageRate is the rate the cycle needs of it: its accounts over the
	// cycle, in syncs a second. NeedRate is what its most crowded slot
	// needs: the slot's accounts over the slot's length (hash placement).
	// For a calendar-month task both are February's, the highest: its
	// accounts over 28 days, and the most crowded 1/31 of the buckets
	// over its share of 28 days.
	NeedRate, AverageRate float64
	// Rate is its rate limit (an operator's override, else
	// Task.Limits.Rate; 0: none).
	Rate float64
	// Concurrency is its limit of syncs in flight (an operator's
	// override, else Task.Limits.Concurrency; 0: none), and
	// ConcurrencyRate the most syncs a second it lets through:
	// Concurrency / Task.Limits.Latency (0: no concurrency limit, or the
	// latency unknown).
	Concurrency     int
	ConcurrencyRate float64
	// Limit is what bounds its throughput, the lower of Rate and
	// ConcurrencyRate where set (0: none); Bound names it: "rate",
	// "concurrency" or "none".
	Limit float64
	Bound string
	// Fits: its accounts fit in a cycle (AverageRate within Limit). An
	// upstream that does not fit has syncs skipped as upstream_throttled
	// every cycle.
	Fits bool
	// OnTime: its busiest slot fits too (NeedRate within Limit). An
	// upstream that fits but is not on time has syncs waiting in line, up
	// to their NotAfter (half a cycle), later than their place.
	OnTime bool
	// Sampled: Accounts and the rates are estimates from a sample of the
	// table (Check on a large table), not a count.
	Sampled bool
}

// The bounds of UpstreamBudget.Bound.
const (
	BoundNone        = "none"
	BoundRate        = "rate"
	BoundConcurrency = "concurrency"
)

// weigh sets b's Limit, Bound, Fits and OnTime from its Rate and its
// Concurrency at latency a call.
func (b *UpstreamBudget) weigh(latency time.Duration) {
	b.ConcurrencyRate, b.Limit, b.Bound = 0, 0, BoundNone
	if b.Concurrency > 0 && latency > 0 {
		b.ConcurrencyRate = float64(b.Concurrency) / latency.Seconds()
	}
	switch {
	case b.Rate > 0 && (b.ConcurrencyRate == 0 || b.Rate <= b.ConcurrencyRate):
		b.Limit, b.Bound = b.Rate, BoundRate
	case b.ConcurrencyRate > 0:
		b.Limit, b.Bound = b.ConcurrencyRate, BoundConcurrency
	}
	b.Fits = b.Limit == 0 || b.AverageRate <= b.Limit
	b.OnTime = b.Limit == 0 || b.NeedRate <= b.Limit
}

// UpstreamBudgetError is the error Check returns for a task whose
// upstreams do not all fit in a cycle at their rate (errors.As finds it
// in Check's joined error, for an app that would rather start anyway).
type UpstreamBudgetError struct {
	Task string
	// Over are the upstreams that do not fit, most needed first.
	Over []UpstreamBudget
}

func (e *UpstreamBudgetError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d upstream(s) of task %q cannot sync their accounts in a cycle at their rate limit:", len(e.Over), e.Task)
	for i, u := range e.Over {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(e.Over)-5)
			break
		}
		about := ""
		if u.Sampled {
			about = "about "
		}
		if u.Bound == BoundConcurrency {
			fmt.Fprintf(&b, " upstream %q has %s%d accounts, which need %.3g syncs/s, its concurrency limit lets %.3g/s through (%d in flight at Limits.Latency a call), below its rate limit;", u.Key, about, u.Accounts, u.AverageRate, u.Limit, u.Concurrency)
			continue
		}
		fmt.Fprintf(&b, " upstream %q has %s%d accounts, which need %.3g syncs/s, its rate limit is %.3g/s;", u.Key, about, u.Accounts, u.AverageRate, u.Rate)
	}
	b.WriteString(" raise their rate or concurrency (riverslot upstream set --key K --rate R --concurrency C, or Task.Limits), lengthen Cycle, or accept that the excess is skipped as upstream_throttled every cycle")
	return b.String()
}

// UpstreamBudgets counts the task's accounts per upstream and slot (one
// scan of the accounts table matching Filter: run it ahead of a deploy,
// not on every start) and compares the rate each upstream needs with its
// limit: the cycle's average (Fits) and its busiest slot's (OnTime).
// Most needed first. Call it after Configure (the overrides live in
// River's schema). Check runs it for a task with rate limits, on a sample
// of a large table.
func (s *Scheduler) UpstreamBudgets(ctx context.Context, taskName string) ([]UpstreamBudget, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	return s.upstreamBudgets(ctx, spec, 100)
}

// sampledMargin: from a sample, Check fails only for an upstream that needs
// more than this times its rate; closer, it warns.
const sampledMargin = 1.25

// budgetSampleRows is the table size (pg_class.reltuples) above which
// Check counts upstreams on a sample of about that many rows.
var budgetSampleRows float64 = 2_000_000 // a var for the sampling test

// upstreamBudgets is UpstreamBudgets over percent of the table's pages
// (TABLESAMPLE SYSTEM), scaled up; 100: every row.
func (s *Scheduler) upstreamBudgets(ctx context.Context, spec *taskspec.Spec, percent float64) ([]UpstreamBudget, error) {
	plan := spec.Plan
	from := spec.QualifiedTable
	args := []any{plan.BucketsPerSlot}
	if percent < 100 {
		// The same pages every time: Check answers the same on an
		// unchanged table.
		from += " TABLESAMPLE SYSTEM ($2) REPEATABLE (0)"
		args = append(args, percent)
	}
	rows, err := spec.AccountsDB(s.pool).Query(ctx, "SELECT "+spec.UpstreamExpr()+", ("+spec.BucketExpr()+") / $1, count(*) FROM "+from+
		" WHERE true"+spec.FilterClause+" GROUP BY 1, 2", args...)
	if err != nil {
		return nil, fmt.Errorf("error counting task %q's accounts per upstream: %w", spec.Name, err)
	}
	// A slot's (bucket group's) accounts are due over its length; for
	// calendar months over the group's share of February, the shortest
	// month (estimateCycle): the highest rate, where the 24 h of a monthly
	// Plan's slot and its 31-day Cycle would understate it by a tenth.
	cycle, _, _ := estimateCycle(plan, spec.Month)
	span := func(slot int) float64 {
		if spec.Month == nil {
			return plan.SlotDuration.Seconds()
		}
		n := min(plan.BucketsPerSlot, plan.Buckets-slot*plan.BucketsPerSlot) // the last group is shorter
		return cycle.Seconds() * float64(n) / float64(plan.Buckets)
	}
	type agg struct {
		total int64
		most  float64 // the busiest slot's rate
	}
	byKey := map[string]*agg{}
	var (
		key  string
		slot int
		n    int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&key, &slot, &n}, func() error {
		a := byKey[key]
		if a == nil {
			a = &agg{}
			byKey[key] = a
		}
		a.total += n
		a.most = max(a.most, float64(n)/span(slot))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error counting task %q's accounts per upstream: %w", spec.Name, err)
	}
	rates, concurrencies := map[string]float64{}, map[string]int{}
	lim := upstream.New(s.riverSchema)
	for after := ""; ; {
		page, err := lim.List(ctx, s.pool, spec.Name, after, 1000)
		if err != nil && !errors.Is(err, upstream.ErrMissing) {
			return nil, err
		}
		for _, st := range page {
			if st.Rate != nil {
				rates[st.Key] = *st.Rate
			}
			if st.Concurrency != nil {
				concurrencies[st.Key] = *st.Concurrency
			}
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Key
	}
	scale := 100 / percent
	out := make([]UpstreamBudget, 0, len(byKey))
	for k, a := range byKey {
		total := int64(math.Round(float64(a.total) * scale))
		b := UpstreamBudget{Key: k, Accounts: total, Rate: spec.Limits.Rate, Concurrency: spec.Limits.Concurrency, Sampled: percent < 100,
			NeedRate: a.most, AverageRate: float64(total) / cycle.Seconds()}
		if b.Sampled {
			// A sample's busiest slot is mostly its noise: the slot a
			// hash spreads evenly, plus three standard deviations.
			b.NeedRate = 0
			for slot := range plan.Slots {
				mean := float64(total) * span(slot) / cycle.Seconds()
				b.NeedRate = max(b.NeedRate, (mean+3*math.Sqrt(mean))/span(slot))
			}
		}
		if r, ok := rates[k]; ok {
			b.Rate = r
		}
		if c, ok := concurrencies[k]; ok {
			b.Concurrency = c
		}
		b.weigh(spec.Limits.Latency)
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b UpstreamBudget) int {
		return cmp.Or(cmp.Compare(b.AverageRate, a.AverageRate), cmp.Compare(b.NeedRate, a.NeedRate), cmp.Compare(a.Key, b.Key))
	})
	return out, nil
}

// checkUpstreamBudget returns an *UpstreamBudgetError when one of a rate
// limited task's upstreams cannot fit its accounts in a cycle: counted,
// or on a table above budgetSampleRows estimated from a sample of about
// that many rows. Tasks without a rate (Limits.Rate and every override
// 0) are not scanned.
func (s *Scheduler) checkUpstreamBudget(ctx context.Context, spec *taskspec.Spec) error {
	if !s.configured || !spec.UsesUpstreamLimiter() {
		return nil
	}
	if spec.Limits.Rate == 0 && (spec.Limits.Latency == 0 || spec.Limits.Concurrency == 0) {
		// No task-wide bound to weigh: an operator's override may set one
		// (a rate, or a concurrency limit weighed at Limits.Latency).
		var anyRate bool
		err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+sqlbucket.QualifiedTable(s.riverSchema, upstream.LimitsTable)+
			" WHERE task = $1 AND (rate > 0 OR ($2 AND concurrency > 0)))", spec.Name, spec.Limits.Latency > 0).Scan(&anyRate)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
			return nil // no overrides table: Check reports the missing ledger, Migrate creates both
		}
		if err != nil {
			return fmt.Errorf("error reading the upstream overrides of task %q: %w", spec.Name, err)
		}
		if !anyRate {
			return nil
		}
	}
	// The table's size: pg_class.reltuples, summed over the partitions of
	// a partitioned table; -1 when it was never analyzed.
	var estimate float64
	if err := spec.AccountsDB(s.pool).QueryRow(ctx, `SELECT coalesce(
		(SELECT CASE WHEN c.relkind = 'p' THEN (SELECT CASE WHEN bool_and(p.reltuples >= 0) THEN sum(p.reltuples) ELSE -1 END
			FROM pg_partition_tree(c.oid) t JOIN pg_class p ON p.oid = t.relid WHERE t.isleaf) ELSE c.reltuples END
		FROM pg_class c WHERE c.oid = to_regclass($1)), -1)::float8`, spec.QualifiedTable).Scan(&estimate); err != nil {
		return fmt.Errorf("error estimating the accounts of Table %s: %w", spec.QualifiedTable, err)
	}
	if estimate < 0 {
		s.log().WarnContext(ctx, "riverslot: the accounts table was never analyzed, so Check does not count its upstreams (a whole-table scan); run ANALYZE on it, or riverslot upstream check before a deploy",
			slog.String("task", spec.Name), slog.String("table", spec.QualifiedTable))
		return nil
	}
	percent := 100.0
	if estimate > budgetSampleRows {
		percent = 100 * budgetSampleRows / estimate
	}
	budgets, err := s.upstreamBudgets(ctx, spec, percent)
	if err != nil {
		return err
	}
	be := &UpstreamBudgetError{Task: spec.Name}
	late, near := 0, 0
	for _, b := range budgets {
		switch {
		case !b.Fits && b.Sampled && b.AverageRate <= sampledMargin*b.Limit:
			// A sample of pages can be this far off on a table whose
			// rows were loaded one upstream at a time.
			near++
		case !b.Fits:
			be.Over = append(be.Over, b)
		case !b.OnTime:
			late++
		}
	}
	if near > 0 {
		s.log().WarnContext(ctx, "riverslot: upstreams that may not fit in a cycle at their rate limit (a sample's estimate within 25% of it); count them with riverslot upstream check",
			slog.String("task", spec.Name), slog.Int("upstreams", near))
	}
	if late > 0 {
		s.log().WarnContext(ctx, "riverslot: upstreams whose busiest slot needs more than their rate limit: their syncs wait in line, later than their place (riverslot upstream check lists them)",
			slog.String("task", spec.Name), slog.Int("upstreams", late))
	}
	if len(be.Over) > 0 {
		return be
	}
	return nil
}
