package riverutil

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/upstream"
)

// UpstreamOverride changes one upstream's limits at run time: a nil field
// keeps the current override, Clear drops them all (the task's Limits
// apply again). Rate 0 or Concurrency 0 lifts that limit for the key.
type UpstreamOverride = upstream.Override

// UpstreamState is one upstream of a task as the limiter holds it: the
// operator's overrides, the breaker, syncs in flight and waiting in line,
// and counters since the upstream's first sync.
type UpstreamState = upstream.State

// SetUpstreamLimits overrides the limits of the task's upstream key, in
// River's database: every node's next decision for a sync of that
// upstream reads it, no deploy needed. The key need not have synced yet.
// Call it after Configure (it needs River's schema).
func (s *Scheduler) SetUpstreamLimits(ctx context.Context, taskName, key string, o UpstreamOverride) error {
	if _, err := s.spec(taskName); err != nil {
		return err
	}
	return upstream.New(s.riverSchema).Set(ctx, s.pool, taskName, key, o)
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
	return upstream.New(s.riverSchema).List(ctx, s.pool, taskName, after, limit)
}

// UpstreamBudget is one upstream's accounts per cycle against its rate
// limit, as UpstreamBudgets counts them.
type UpstreamBudget struct {
	// Key is the upstream ("" the task's default).
	Key string
	// Accounts is how many accounts matching Filter it has.
	Accounts int64
	// NeedRate is the rate the cycle needs of it: its most crowded slot's
	// accounts over the slot's length (hash placement), in syncs a second;
	// AverageRate its accounts over the cycle.
	NeedRate, AverageRate float64
	// Rate is its limit (an operator's override, else Task.Limits.Rate;
	// 0: none) and Fits whether NeedRate is within it.
	Rate float64
	Fits bool
}

// UpstreamBudgets counts the task's accounts per upstream and slot (one
// scan of the accounts table matching Filter: run it ahead of a deploy,
// not on every start) and compares the rate each upstream's busiest slot
// needs with its limit: an upstream that does not fit has syncs waiting
// in line, and those that reach their NotAfter skipped as
// upstream_throttled. Most needed first. Call it after Configure (the
// overrides live in River's schema).
func (s *Scheduler) UpstreamBudgets(ctx context.Context, taskName string) ([]UpstreamBudget, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	plan := spec.Plan
	rows, err := spec.AccountsDB(s.pool).Query(ctx, "SELECT "+spec.UpstreamExpr()+", ("+spec.BucketExpr()+") / $1, count(*) FROM "+spec.QualifiedTable+
		" WHERE true"+spec.FilterClause+" GROUP BY 1, 2", plan.BucketsPerSlot)
	if err != nil {
		return nil, fmt.Errorf("error counting task %q's accounts per upstream: %w", taskName, err)
	}
	type agg struct{ total, most int64 }
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
		a.most = max(a.most, n)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error counting task %q's accounts per upstream: %w", taskName, err)
	}
	overrides := map[string]float64{}
	lim := upstream.New(s.riverSchema)
	for after := ""; ; {
		page, err := lim.List(ctx, s.pool, taskName, after, 1000)
		if err != nil && !errors.Is(err, upstream.ErrMissing) {
			return nil, err
		}
		for _, st := range page {
			if st.Rate != nil {
				overrides[st.Key] = *st.Rate
			}
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Key
	}
	out := make([]UpstreamBudget, 0, len(byKey))
	for k, a := range byKey {
		b := UpstreamBudget{Key: k, Accounts: a.total, Rate: spec.Limits.Rate,
			NeedRate: float64(a.most) / plan.SlotDuration.Seconds(), AverageRate: float64(a.total) / plan.Cycle.Seconds()}
		if r, ok := overrides[k]; ok {
			b.Rate = r
		}
		b.Fits = b.Rate == 0 || b.NeedRate <= b.Rate
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b UpstreamBudget) int {
		return cmp.Or(cmp.Compare(b.NeedRate, a.NeedRate), cmp.Compare(a.Key, b.Key))
	})
	return out, nil
}
