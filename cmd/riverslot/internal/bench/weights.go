package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/pinning"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// weights measures weighted placement on WeightsAccounts accounts over the
// 128 slots of a 24h cycle, hash-only beside balanced:
//
//   - for each of weightCases, in pure Go with the placement the bootstrap
//     runs (slotplan.PlacePins): per-slot weight max/mean against the
//     target max(1 + epsilon, w + epsilon), and how many accounts 10% churn
//     moves (a third removed, a third added, a third reweighted, placed
//     again with the first placement's pins as the previous ones);
//   - on a real table with Pareto(1.5) weights: the pins computed by the
//     bootstrap's code (pinning.Place), then every slot's full keyset
//     selection, weighted (bucket range minus the cycle's pins, then the
//     slot's pins) and unweighted, alternating, pages of BatchSize.
func (r *Runner) weights(ctx context.Context) error {
	plan, err := slotplan.New(24 * time.Hour)
	if err != nil {
		return err
	}
	n := r.cfg.WeightsAccounts
	eps := slotplan.WeightEpsilonDefault
	var (
		chartCase simPlacement
		pareto    []simAccount
	)
	for i, c := range weightCases {
		begun := time.Now()
		q := measureWeights(plan, c, n, eps)
		r.logf("weights %s: placed and churned %d accounts in %s", c.name, n, time.Since(begun).Round(time.Millisecond))
		ok := "meets"
		if q.balancedMaxMean > q.target {
			ok = "MISSES"
		}
		r.row(fmt.Sprintf("per-slot weight max/mean, %s (128 slots; target max(1.10, w+0.10), w = %.3f)", c.name, q.heaviestOverMean), human(n),
			fmt.Sprintf("%.3f balanced (%d pinned above weight %.1f)", q.balancedMaxMean, q.pins, q.threshold),
			fmt.Sprintf("%.3f hash-only", q.hashMaxMean),
			fmt.Sprintf("%s the target %.3f", ok, q.target))
		r.row(fmt.Sprintf("10%% churn, %s: accounts moved to another slot (target <= 0.5%%)", c.name), human(n),
			fmt.Sprintf("%d of %d stayed (%.3f%%), %d pinned after", q.moved, q.kept, 100*float64(q.moved)/float64(q.kept), q.pinsAfter),
			"0 hash-only (ordinary accounts never move)",
			fmt.Sprintf("max/mean after %.3f", q.balancedAfterMaxMean))
		if i == 0 {
			pareto = simAccounts(c, n, 1)
			chartCase = simulate(plan, pareto, nil, eps)
		}
	}
	// Pareto(1.5) is heavy-tailed enough that the heaviest of 1M accounts
	// often outweighs a slot (a giant): the same targets over 12 draws.
	begun := time.Now()
	met, wMin, wMax, worst := 0, math.Inf(1), 0.0, math.Inf(-1)
	const seeds = 12
	for seed := uint64(1); seed <= seeds; seed++ {
		q := measureWeightsSeed(plan, weightCases[0], n, eps, seed)
		wMin, wMax = min(wMin, q.heaviestOverMean), max(wMax, q.heaviestOverMean)
		worst = max(worst, q.balancedMaxMean-q.target, q.balancedAfterMaxMean-q.targetAfter)
		if q.balancedMaxMean <= q.target && q.balancedAfterMaxMean <= q.targetAfter && float64(q.moved) <= 0.005*float64(q.kept) {
			met++
		}
	}
	r.logf("weights: %d Pareto draws placed and churned in %s", seeds, time.Since(begun).Round(time.Millisecond))
	r.row(fmt.Sprintf("Pareto(1.5) draws (seeds 1-%d) meeting every target: max/mean before and after churn, churn <= 0.5%%", seeds), human(n),
		fmt.Sprintf("%d of %d (w from %.3f to %.3f)", met, seeds, wMin, wMax), "-",
		fmt.Sprintf("closest to a bound: max/mean %.3f under it", -worst))
	if r.cfg.WeightsChartPath != "" {
		if err := os.WriteFile(r.cfg.WeightsChartPath, []byte(weightsChart(chartCase, weightCases[0].name, n)), 0o644); err != nil {
			return err
		}
		r.logf("wrote %s", r.cfg.WeightsChartPath)
	}
	return r.weightedSelection(ctx, plan, pareto, chartCase, eps)
}

// weightedSelection times per-slot selection with and without weights on
// the accounts of the Pareto(1.5) case, the same ones the pure-Go figures
// placed (sim), and checks the bootstrap's code pins exactly as many.
func (r *Runner) weightedSelection(ctx context.Context, plan slotplan.Plan, accounts []simAccount, sim simPlacement, eps float64) error {
	n := len(accounts)
	schema, drop, err := r.schema(ctx, "weights")
	if err != nil {
		return err
	}
	defer drop()
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := r.cfg.Pool.Exec(ctx, "CREATE TABLE "+table+" (id uuid NOT NULL, active boolean NOT NULL DEFAULT true, weight double precision NOT NULL)"); err != nil {
		return err
	}
	if _, err := r.cfg.Pool.CopyFrom(ctx, pgx.Identifier{schema, "accounts"}, []string{"id", "weight"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) { return []any{uuid.UUID(accounts[i].id), accounts[i].w}, nil })); err != nil {
		return fmt.Errorf("error seeding weighted accounts: %w", err)
	}
	for _, stmt := range []string{
		"ALTER TABLE " + table + " ADD PRIMARY KEY (id)",
		"CREATE INDEX " + pgx.Identifier{bucketIndex}.Sanitize() + " ON " + table + " ((" + sqlbucket.Expr("id") + "), id)",
		"VACUUM ANALYZE " + table,
	} {
		if _, err := r.cfg.Pool.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	r.logf("seeded %d weighted accounts in %s", n, schema)
	for _, ddl := range taskspec.PinsDDL(schema) {
		if _, err := r.cfg.Pool.Exec(ctx, ddl); err != nil {
			return err
		}
	}

	spec := func(weight string) *taskspec.Spec {
		s := &taskspec.Spec{Name: "bench", Plan: plan, Seed: 1, Key: taskspec.KeyOf(plan, 1, 0), PlanID: taskspec.PlanID(plan, 1, 0),
			Schema: schema, Table: "accounts", IDColumn: "id", Weight: weight, WeightEpsilon: eps, BatchSize: r.cfg.BatchSize, DirectMax: riverslot.PinsDirectMax}
		s.BuildSQL()
		return s
	}
	weighted, plain := spec("weight"), spec("")
	cycleStart := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	// Above DirectMax the census job takes the cycle's weight census ahead
	// of it, in steps of their own; the bootstrap then computes the pins
	// from it. Both are timed, as they run: apart.
	var (
		censusTime time.Duration
		census     pinning.Census
	)
	if int64(n) > weighted.DirectMax {
		begun := time.Now()
		if census, _, err = pinning.Run(ctx, r.cfg.Pool, weighted, cycleStart, time.Time{}, time.Time{}); err != nil {
			return fmt.Errorf("weight census: %w", err)
		}
		censusTime = time.Since(begun)
	}
	tx, err := r.cfg.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	begun := time.Now()
	out, err := pinning.Place(ctx, tx, r.cfg.Pool, weighted, cycleStart)
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	placeTime := time.Since(begun)
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if _, err := r.cfg.Pool.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()); err != nil {
		return err
	}
	r.logf("pinned %d of %d accounts in %s", out.Pinned, n, placeTime.Round(time.Millisecond))
	if out.Pinned != len(sim.pins) {
		return fmt.Errorf("the bootstrap's code pinned %d accounts, the pure-Go placement of the same accounts %d", out.Pinned, len(sim.pins))
	}
	var dbMaxMean float64
	if err := r.cfg.Pool.QueryRow(ctx, "SELECT max(w) / avg(w) FROM (SELECT coalesce(p.slot, "+sqlbucket.Expr("id")+" / $2) AS slot, sum(a.weight) AS w FROM "+table+
		" a LEFT JOIN "+pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()+" p ON p.account_id = a.id AND p.cycle_start = $1 GROUP BY 1) s",
		cycleStart, plan.BucketsPerSlot).Scan(&dbMaxMean); err != nil {
		return err
	}

	// selectSlot pages through one slot as the per-slot job does: the
	// bucket range's pages (leaving out, for the weighted task, each
	// page's pinned accounts, read by the page's key range), then the
	// accounts pinned to the slot. It returns the accounts selected and
	// the time.
	selectSlot := func(s *taskspec.Spec, slot int) (int, time.Duration, error) {
		lo, hi := plan.BucketRange(slot)
		pin := []any{s.Name, s.PlanID, cycleStart}
		read := s.PinRead(s.Schema)
		begun := time.Now()
		total := 0
		var (
			bucket int
			after  uuid.UUID
			page   []any
		)
		type row struct {
			ID     uuid.UUID
			Bucket int
		}
		for phase := 0; phase < 2; phase++ {
			started := false
			for {
				switch {
				case phase == 0 && started:
					page = []any{s.SQL.NextPage, lo, hi, s.BatchSize, bucket, after}
				case phase == 0:
					page = []any{s.SQL.FirstPage, lo, hi, s.BatchSize}
				case started:
					page = append([]any{read.PinnedNextPage}, append(pin[:3:3], slot, s.BatchSize, after)...)
				default:
					page = append([]any{read.PinnedFirstPage}, append(pin[:3:3], slot, s.BatchSize)...)
				}
				rows, err := r.cfg.Pool.Query(ctx, page[0].(string), page[1:]...)
				if err != nil {
					return 0, 0, err
				}
				got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
				if err != nil {
					return 0, 0, err
				}
				var pinned map[uuid.UUID]bool
				if phase == 0 && s.Weighted() && len(got) > 0 {
					first, last := got[0], got[len(got)-1]
					rows, err := r.cfg.Pool.Query(ctx, read.PageRange, append(pin[:3:3], first.Bucket, first.ID, last.Bucket, last.ID)...)
					if err != nil {
						return 0, 0, err
					}
					ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
					if err != nil {
						return 0, 0, err
					}
					pinned = make(map[uuid.UUID]bool, len(ids))
					for _, id := range ids {
						pinned[id] = true
					}
				}
				for _, a := range got {
					if !pinned[a.ID] {
						total++
					}
				}
				if len(got) > 0 {
					after, bucket = got[len(got)-1].ID, got[len(got)-1].Bucket
				}
				started = true
				if len(got) < s.BatchSize {
					break
				}
			}
			if !s.Weighted() {
				break
			}
		}
		return total, time.Since(begun), nil
	}

	// Warm both paths once, then time every slot with each, alternating.
	for _, s := range []*taskspec.Spec{plain, weighted} {
		if _, _, err := selectSlot(s, 0); err != nil {
			return err
		}
	}
	r.logf("per-slot selection, weighted and unweighted, over %d slots of %d accounts", plan.Slots, n)
	var plainTimes, weightedTimes []time.Duration
	plainTotal, weightedTotal := 0, 0
	for slot := range plan.Slots {
		k, d, err := selectSlot(plain, slot)
		if err != nil {
			return fmt.Errorf("unweighted selection of slot %d: %w", slot, err)
		}
		plainTimes, plainTotal = append(plainTimes, d), plainTotal+k
		k, d, err = selectSlot(weighted, slot)
		if err != nil {
			return fmt.Errorf("weighted selection of slot %d: %w", slot, err)
		}
		weightedTimes, weightedTotal = append(weightedTimes, d), weightedTotal+k
	}
	if plainTotal != n || weightedTotal != n {
		return fmt.Errorf("selection returned %d accounts unweighted and %d weighted, of %d", plainTotal, weightedTotal, n)
	}
	pm, wm := median(plainTimes), median(weightedTimes)
	r.row(fmt.Sprintf("weighted per-slot selection (Pareto 1.5, %d pinned; all 128 slots, alternating, pages of %d; median per slot; target within 2x)", out.Pinned, r.cfg.BatchSize), human(n),
		ms(wm)+" weighted", ms(pm)+" unweighted", fmt.Sprintf("%.2fx the time", float64(wm)/float64(pm)))
	how := "scanning every account"
	if censusTime > 0 {
		r.row("weight census (the census job, during the previous cycle; same accounts as pareto-1.5)", human(n), fmt.Sprintf("%.2f s", censusTime.Seconds()), "none hash-only",
			fmt.Sprintf("%d steps of %.0f ms, each a transaction of its own", census.Steps, float64(censusTime.Milliseconds())/float64(max(census.Steps, 1))))
		how = "from the weight census"
	}
	r.row(fmt.Sprintf("computing a cycle's pins in Postgres (bootstrap, once per cycle, %s; same accounts as pareto-1.5)", how), human(n), fmt.Sprintf("%.2f s", placeTime.Seconds()), "none hash-only",
		fmt.Sprintf("%d pinned above weight %.1f; per-slot max/mean %.3f from the pins table", out.Pinned, out.Threshold, dbMaxMean))
	return nil
}

// weightsChart draws per-slot weight over the mean slot weight, hash-only
// beside balanced, as an SVG.
func weightsChart(p simPlacement, name string, accounts int) string {
	const (
		w, h                     = 920, 360
		left, right, top, bottom = 60, 20, 40, 50
	)
	slots := len(p.hash)
	mean := 0.0
	for _, l := range p.hash {
		mean += l
	}
	mean /= float64(slots)
	maxY := 0.0
	for s := range slots {
		maxY = max(maxY, p.hash[s]/mean, p.balanced[s]/mean)
	}
	maxY = math.Ceil(maxY*5) / 5
	x := func(slot float64) float64 { return left + slot/float64(slots)*float64(w-left-right) }
	y := func(v float64) float64 { return float64(h-bottom) - v/maxY*float64(h-top-bottom) }
	bar := (float64(w-left-right) / float64(slots)) / 2

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">Per-slot weight / mean slot weight, %s accounts over 128 slots, %s weights</text>`+"\n", left, human(accounts), name)
	for v := 0.0; v <= maxY+1e-9; v += 0.2 {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", left, y(v), w-right, y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.1f</text>`+"\n", left-6, y(v)+4, v)
	}
	for s := range slots {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.2f" height="%.1f" fill="#d62728"/>`+"\n", x(float64(s)), y(p.hash[s]/mean), bar, y(0)-y(p.hash[s]/mean))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.2f" height="%.1f" fill="#2ca02c"/>`+"\n", x(float64(s))+bar, y(p.balanced[s]/mean), bar, y(0)-y(p.balanced[s]/mean))
	}
	for _, ref := range []struct {
		v     float64
		color string
		label string
	}{{1, "#555", "mean"}, {1.1, "#1f77b4", "1 + epsilon (1.10)"}} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="4 3"/>`+"\n", left, y(ref.v), w-right, y(ref.v), ref.color)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", w-right-4, y(ref.v)-4, ref.color, ref.label)
	}
	for s := 0; s <= slots; s += 16 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x(float64(s)), h-bottom+16, s)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">slot</text>`+"\n", (left+w-right)/2, h-12)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, h-bottom, w-right, h-bottom)
	hashMax, balMax := maxOverMean(p.hash), maxOverMean(p.balanced)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="#d62728"/><text x="%d" y="%d">hash only (max/mean %.3f)</text>`+"\n", left+10, top, left+28, top+10, hashMax)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="#2ca02c"/><text x="%d" y="%d">balanced, %d jumbo accounts pinned (max/mean %.3f)</text>`+"\n", left+230, top, left+248, top+10, len(p.pins), balMax)
	b.WriteString("</svg>\n")
	return b.String()
}
