package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/pinning"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// simAccount is one account of the pure-Go placement simulation.
type simAccount struct {
	id [16]byte
	w  float64
}

// weightCase is a weight distribution of the weights benchmark.
type weightCase struct {
	name string
	draw func(rng *rand.Rand, i, n int) float64
}

// weightCases are the two heavy-tailed distributions: Pareto with
// alpha 1.5 (minimum 1), and 1% of accounts at weight 99 beside 99% at
// weight 1, so the 1% carry half of all weight.
var weightCases = []weightCase{
	{"pareto-1.5", func(rng *rand.Rand, _, _ int) float64 { return Pareto(rng, 1.5) }},
	{"1%-carry-half", func(rng *rand.Rand, _, _ int) float64 {
		if rng.IntN(100) == 0 {
			return 99
		}
		return 1
	}},
}

// Pareto draws from Pareto(alpha) with minimum 1 by inversion.
func Pareto(rng *rand.Rand, alpha float64) float64 {
	return math.Pow(1-rng.Float64(), -1/alpha)
}

// simAccounts draws n accounts with random UUIDs and weights of c, from a
// fixed seed.
func simAccounts(c weightCase, n int, seed uint64) []simAccount {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]simAccount, n)
	for i := range out {
		out[i] = simAccount{id: randomID(rng), w: c.draw(rng, i, n)}
	}
	return out
}

func randomID(rng *rand.Rand) [16]byte {
	var id [16]byte
	a, b := rng.Uint64(), rng.Uint64()
	for k := range 8 {
		id[k], id[8+k] = byte(a>>(8*k)), byte(b>>(8*k))
	}
	id[6] = id[6]&0x0f | 0x40 // version 4
	id[8] = id[8]&0x3f | 0x80
	return id
}

// simCandidates is how many of the heaviest accounts the simulation hands to
// PlacePins, as the bootstrap's candidate query does (its LIMIT).
const simCandidates = 100_000

// simPlacement is the outcome of placing accounts over plan's slots.
type simPlacement struct {
	pins      map[[16]byte]int
	threshold float64
	hash      []float64 // per-slot weight, hash-only
	balanced  []float64 // per-slot weight with the pins
	heaviest  float64
}

// simulate places accounts as the bootstrap does: per-slot hash totals, the
// heaviest simCandidates accounts plus the previous pins as candidates,
// slotplan.PlacePins.
func simulate(plan slotplan.Plan, accounts []simAccount, prev map[[16]byte]int, epsilon float64) simPlacement {
	p := simPlacement{hash: make([]float64, plan.Slots), balanced: make([]float64, plan.Slots), pins: map[[16]byte]int{}}
	sumSq := 0.0
	for _, a := range accounts {
		p.hash[plan.SlotOf(a.id)] += a.w
		sumSq += a.w * a.w
		p.heaviest = max(p.heaviest, a.w)
	}
	byWeight := make([]int, len(accounts))
	for i := range byWeight {
		byWeight[i] = i
	}
	sort.Slice(byWeight, func(x, y int) bool { return accounts[byWeight[x]].w > accounts[byWeight[y]].w })
	var candidates []slotplan.Jumbo
	seen := map[[16]byte]bool{}
	for k, i := range byWeight {
		a := accounts[i]
		prevSlot, pinned := prev[a.id]
		if k >= simCandidates && !pinned {
			continue
		}
		if !pinned {
			prevSlot = -1
		}
		seen[a.id] = true
		candidates = append(candidates, slotplan.Jumbo{ID: a.id, Weight: a.w, Home: plan.SlotOf(a.id), Prev: prevSlot})
	}
	// Giants get a slot of their own: every other account hashed to it is
	// an evacuee, as the bootstrap lists them (internal/pinning).
	reserved := slotplan.Giants(p.hash, candidates, epsilon)
	var evacuees []slotplan.Jumbo
	if len(reserved) > 0 {
		kept := map[int]bool{}
		for _, r := range reserved {
			kept[r.Slot] = true
		}
		for _, a := range accounts {
			if home := plan.SlotOf(a.id); kept[home] {
				prevSlot, pinned := prev[a.id]
				if !pinned {
					prevSlot = -1
				}
				evacuees = append(evacuees, slotplan.Jumbo{ID: a.id, Weight: a.w, Home: home, Prev: prevSlot})
			}
		}
	}
	threshold, pins := slotplan.PlacePinsReserved(p.hash, sumSq, candidates, evacuees, reserved, epsilon)
	p.threshold = threshold
	copy(p.balanced, p.hash)
	for _, pin := range pins {
		p.pins[pin.ID] = pin.Slot
		p.balanced[plan.SlotOf(pin.ID)] -= pin.Weight
		p.balanced[pin.Slot] += pin.Weight
	}
	return p
}

// slotOf is where the placement serves the account.
func (p simPlacement) slotOf(plan slotplan.Plan, id [16]byte) int {
	if s, ok := p.pins[id]; ok {
		return s
	}
	return plan.SlotOf(id)
}

// maxOverMean is the heaviest slot's weight over the mean slot weight.
func maxOverMean(loads []float64) float64 {
	total, heaviest := 0.0, 0.0
	for _, l := range loads {
		total += l
		heaviest = max(heaviest, l)
	}
	return heaviest / (total / float64(len(loads)))
}

// churn returns accounts after churn (a fraction, e.g. 0.10) of them changed:
// a third removed, a third as many new ones added, a third given a new
// weight from c.
func churn(c weightCase, accounts []simAccount, fraction float64, seed uint64) []simAccount {
	rng := rand.New(rand.NewPCG(seed, 0xc4))
	third := int(float64(len(accounts)) * fraction / 3)
	out := make([]simAccount, 0, len(accounts)+third)
	perm := rng.Perm(len(accounts))
	removed := map[int]bool{}
	for _, i := range perm[:third] {
		removed[i] = true
	}
	changed := map[int]bool{}
	for _, i := range perm[third : 2*third] {
		changed[i] = true
	}
	for i, a := range accounts {
		switch {
		case removed[i]:
			continue
		case changed[i]:
			a.w = c.draw(rng, i, len(accounts))
		}
		out = append(out, a)
	}
	for i := range third {
		out = append(out, simAccount{id: randomID(rng), w: c.draw(rng, i, len(accounts))})
	}
	return out
}

// weightsQuality is one case's placement figures.
type weightsQuality struct {
	hashMaxMean, balancedMaxMean float64
	target                       float64 // max(1 + epsilon, w + epsilon)
	heaviestOverMean             float64 // w
	pins                         int
	threshold                    float64
	moved, kept                  int // accounts present before and after churn: moved slot, all
	pinsAfter                    int
	balancedAfterMaxMean         float64
	targetAfter                  float64
}

// measureWeights places n accounts of case c over plan's slots, churns 10%
// of them and places them again with the first placement's pins as the
// previous ones.
func measureWeights(plan slotplan.Plan, c weightCase, n int, epsilon float64) weightsQuality {
	return measureWeightsSeed(plan, c, n, epsilon, 1)
}

// measureWeightsSeed is measureWeights on the accounts drawn from seed.
func measureWeightsSeed(plan slotplan.Plan, c weightCase, n int, epsilon float64, seed uint64) weightsQuality {
	accounts := simAccounts(c, n, seed)
	before := simulate(plan, accounts, nil, epsilon)
	afterAccounts := churn(c, accounts, 0.10, 2)
	after := simulate(plan, afterAccounts, before.pins, epsilon)
	return quality(plan, accounts, before, afterAccounts, after, epsilon)
}

// quality is the figures of a placement of accounts (before) and of the
// placement of afterAccounts, the same accounts after churn, that followed
// it (after).
func quality(plan slotplan.Plan, accounts []simAccount, before simPlacement, afterAccounts []simAccount, after simPlacement, epsilon float64) weightsQuality {
	q := weightsQuality{
		hashMaxMean:     maxOverMean(before.hash),
		balancedMaxMean: maxOverMean(before.balanced),
		pins:            len(before.pins),
		threshold:       before.threshold,
	}
	q.heaviestOverMean, q.target = target(before, epsilon)
	q.pinsAfter = len(after.pins)
	q.balancedAfterMaxMean = maxOverMean(after.balanced)
	_, q.targetAfter = target(after, epsilon)
	present := make(map[[16]byte]bool, len(afterAccounts))
	for _, a := range afterAccounts {
		present[a.id] = true
	}
	for _, a := range accounts {
		if !present[a.id] {
			continue
		}
		q.kept++
		if before.slotOf(plan, a.id) != after.slotOf(plan, a.id) {
			q.moved++
		}
	}
	return q
}

// target is the bound on max/mean: max(1 + epsilon, w + epsilon),
// w the heaviest account over the mean slot weight.
func target(p simPlacement, epsilon float64) (w, bound float64) {
	total := 0.0
	for _, l := range p.hash {
		total += l
	}
	w = p.heaviest / (total / float64(len(p.hash)))
	return w, max(1+epsilon, w+epsilon)
}

// measureWeightsPostgres is measureWeightsSeed through the bootstrap's own
// code instead of the pure-Go placement: it seeds the accounts drawn from
// seed into schema (an empty schema the caller owns), computes the pins of
// a cycle with pinning.Place in one transaction, as the bootstrap does,
// applies the churn to the table, and computes the pins of the next cycle
// (Place reads the first cycle's pins as the previous ones). The figures
// come from the pins tables read back.
func measureWeightsPostgres(ctx context.Context, pool *pgxpool.Pool, schema string, plan slotplan.Plan, c weightCase, n int, epsilon float64, seed uint64) (weightsQuality, error) {
	accounts := simAccounts(c, n, seed)
	spec, err := seedWeighted(ctx, pool, schema, plan, accounts, epsilon)
	if err != nil {
		return weightsQuality{}, err
	}
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	before, err := placeInPostgres(ctx, pool, spec, accounts, first)
	if err != nil {
		return weightsQuality{}, err
	}
	afterAccounts := churn(c, accounts, 0.10, 2)
	if err := applyChurn(ctx, pool, spec, accounts, afterAccounts); err != nil {
		return weightsQuality{}, err
	}
	after, err := placeInPostgres(ctx, pool, spec, afterAccounts, first.Add(plan.Cycle))
	if err != nil {
		return weightsQuality{}, err
	}
	return quality(plan, accounts, before, afterAccounts, after, epsilon), nil
}

// seedWeighted creates schema.accounts holding accounts, with the primary
// key and bucket index a task's table has and the pins tables, as the
// bench's selection round does, and returns a weighted task spec over it.
func seedWeighted(ctx context.Context, pool *pgxpool.Pool, schema string, plan slotplan.Plan, accounts []simAccount, epsilon float64) (*taskspec.Spec, error) {
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	// Unlogged: nothing here needs to survive a crash, and a million rows
	// load and index faster without WAL.
	if _, err := pool.Exec(ctx, "CREATE UNLOGGED TABLE "+table+" (id uuid NOT NULL, active boolean NOT NULL DEFAULT true, weight double precision NOT NULL)"); err != nil {
		return nil, fmt.Errorf("error creating the accounts table: %w", err)
	}
	// [16]byte is pgx's own uuid type: uuid.UUID would go through its
	// text form, ten times slower for a million rows.
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "accounts"}, []string{"id", "weight"},
		pgx.CopyFromSlice(len(accounts), func(i int) ([]any, error) { return []any{accounts[i].id, accounts[i].w}, nil })); err != nil {
		return nil, fmt.Errorf("error seeding weighted accounts: %w", err)
	}
	stmts := []string{
		"ALTER TABLE " + table + " ADD PRIMARY KEY (id)",
		"CREATE INDEX " + pgx.Identifier{bucketIndex}.Sanitize() + " ON " + table + " ((" + sqlbucket.Expr("id") + "), id)",
		"ANALYZE " + table,
	}
	for _, stmt := range append(stmts, taskspec.PinsDDL(schema)...) {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("error preparing the weighted accounts table: %w", err)
		}
	}
	spec := &taskspec.Spec{Name: "bench", Plan: plan, Seed: 1, Key: taskspec.KeyOf(plan, 1, 0), PlanID: taskspec.PlanID(plan, 1, 0),
		Schema: schema, Table: "accounts", IDColumn: "id", Weight: "weight", WeightEpsilon: epsilon, BatchSize: 2000, DirectMax: riverslot.PinsDirectMax}
	spec.BuildSQL()
	return spec, nil
}

// placeInPostgres computes the pins of spec's cycle starting at cycleStart
// with pinning.Place, in one committed transaction as the bootstrap does,
// and returns the placement of accounts (the table's rows) it stored: an
// account's slot is its pin's for that cycle, else its hash slot.
func placeInPostgres(ctx context.Context, pool *pgxpool.Pool, spec *taskspec.Spec, accounts []simAccount, cycleStart time.Time) (simPlacement, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return simPlacement{}, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	// Above DirectMax, the cycle's own weight census first, as its census
	// job takes it ahead, so the pins follow the weights as they are now
	// (a census of the cycle before would predate the churn).
	if int64(len(accounts)) > spec.DirectMax {
		if _, _, err := pinning.Run(ctx, pool, spec, cycleStart, time.Time{}, time.Time{}); err != nil {
			return simPlacement{}, err
		}
	}
	out, err := pinning.Place(ctx, tx, pool, spec, cycleStart)
	if err != nil {
		return simPlacement{}, err
	}
	if out.Reused {
		return simPlacement{}, fmt.Errorf("the pins of cycle %s were already computed", cycleStart.Format(time.RFC3339))
	}
	if err := tx.Commit(ctx); err != nil {
		return simPlacement{}, err
	}

	rows, err := pool.Query(ctx, "SELECT account_id, slot FROM "+pgx.Identifier{spec.Schema, taskspec.PinsTable}.Sanitize()+
		" WHERE task = $1 AND plan = $2 AND cycle_start = $3", spec.Name, spec.PlanID, cycleStart)
	if err != nil {
		return simPlacement{}, fmt.Errorf("error reading the pins: %w", err)
	}
	p := simPlacement{pins: map[[16]byte]int{}, threshold: out.Threshold,
		hash: make([]float64, spec.Plan.Slots), balanced: make([]float64, spec.Plan.Slots)}
	var (
		id   [16]byte
		slot int
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &slot}, func() error {
		if slot < 0 || slot >= spec.Plan.Slots {
			return fmt.Errorf("account %s pinned to slot %d of %d", uuid.UUID(id), slot, spec.Plan.Slots)
		}
		p.pins[id] = slot
		return nil
	}); err != nil {
		return simPlacement{}, fmt.Errorf("error reading the pins: %w", err)
	}
	if len(p.pins) != out.Pinned {
		return simPlacement{}, fmt.Errorf("pinning.Place reported %d pins, the pins table holds %d", out.Pinned, len(p.pins))
	}
	var rowCount int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+spec.QualifiedTable).Scan(&rowCount); err != nil {
		return simPlacement{}, err
	}
	if rowCount != len(accounts) {
		return simPlacement{}, fmt.Errorf("the table holds %d accounts, the placement is of %d", rowCount, len(accounts))
	}
	for _, a := range accounts {
		p.hash[spec.Plan.SlotOf(a.id)] += a.w
		p.balanced[p.slotOf(spec.Plan, a.id)] += a.w
		p.heaviest = max(p.heaviest, a.w)
	}
	return p, nil
}

// applyChurn turns spec's table from before into after (churn's output):
// it deletes the accounts after lacks, updates changed weights and inserts
// the new accounts, then analyzes the table.
func applyChurn(ctx context.Context, pool *pgxpool.Pool, spec *taskspec.Spec, before, after []simAccount) error {
	weightOf := make(map[[16]byte]float64, len(after))
	for _, a := range after {
		weightOf[a.id] = a.w
	}
	var removed, changed [][16]byte
	var weights []float64
	known := make(map[[16]byte]bool, len(before))
	for _, a := range before {
		known[a.id] = true
		switch w, ok := weightOf[a.id]; {
		case !ok:
			removed = append(removed, a.id)
		case w != a.w:
			changed, weights = append(changed, a.id), append(weights, w)
		}
	}
	var added [][]any
	for _, a := range after {
		if !known[a.id] {
			added = append(added, []any{a.id, a.w})
		}
	}
	table := pgx.Identifier{spec.Schema, spec.Table}.Sanitize()
	if _, err := pool.Exec(ctx, "DELETE FROM "+table+" a USING unnest($1::uuid[]) AS r (id) WHERE a.id = r.id", removed); err != nil {
		return fmt.Errorf("error removing %d accounts: %w", len(removed), err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+table+" a SET weight = c.weight FROM unnest($1::uuid[], $2::float8[]) AS c (id, weight) WHERE a.id = c.id",
		changed, weights); err != nil {
		return fmt.Errorf("error reweighting %d accounts: %w", len(changed), err)
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{spec.Schema, spec.Table}, []string{"id", "weight"}, pgx.CopyFromRows(added)); err != nil {
		return fmt.Errorf("error adding %d accounts: %w", len(added), err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+table); err != nil {
		return err
	}
	return nil
}
