package pinning

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

// dyadicWeights fills the table %s with 6,000 accounts whose weights are
// multiples of 1/64 (Pareto(1.5)-like, up to a few thousand), 40 jumbos of
// 300 and one giant of 20,000: every sum of them is exact in float8,
// whatever the order of addition, so two ways of summing agree to the bit.
const dyadicWeights = "INSERT INTO %s SELECT gen_random_uuid(), round(least(power(1 - random(), -1 / 1.5), 4000) * 64) / 64 FROM generate_series(1, 6000);" +
	" INSERT INTO %[1]s SELECT gen_random_uuid(), 300 FROM generate_series(1, 40);" +
	" INSERT INTO %[1]s VALUES (gen_random_uuid(), 20000)"

// direct is what a census must equal: per-slot totals by home slot, the sum
// of squares, the count and the k heaviest accounts, read with one GROUP BY
// and one ORDER BY over the whole table.
func direct(ctx context.Context, t *testing.T, pool *pgxpool.Pool, spec *taskspec.Spec, k int) Census {
	t.Helper()
	want := Census{Totals: make([]float64, spec.Plan.Slots)}
	rows, err := pool.Query(ctx, "SELECT "+spec.BucketExpr()+", sum(weight), sum(weight * weight), count(*) FROM "+spec.QualifiedTable+" GROUP BY 1")
	require.NoError(t, err)
	var (
		bucket  int
		sum, sq float64
		n       int64
	)
	_, err = pgx.ForEachRow(rows, []any{&bucket, &sum, &sq, &n}, func() error {
		want.Totals[spec.Plan.Shift(spec.Plan.SlotOfBucket(bucket), spec.Shift)] += sum
		want.SumSq += sq
		want.Accounts += n
		return nil
	})
	require.NoError(t, err)
	rows, err = pool.Query(ctx, "SELECT id, "+spec.BucketExpr()+", weight FROM "+spec.QualifiedTable+" ORDER BY weight DESC, id LIMIT $1", k)
	require.NoError(t, err)
	var c Candidate
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &c.Bucket, &c.Weight}, func() error {
		want.Candidates = append(want.Candidates, c)
		return nil
	})
	require.NoError(t, err)
	return want
}

// requireCensus checks a finished census, as its last step returned it
// and as stored, against the direct computation.
func requireCensus(ctx context.Context, t *testing.T, pool *pgxpool.Pool, spec *taskspec.Spec, want, got Census, steps int) {
	t.Helper()
	require.True(t, got.Finished)
	stored, err := readCensus(ctx, pool, spec, got.CycleStart)
	require.NoError(t, err)
	require.Equal(t, got.Totals, stored.Totals)
	require.Equal(t, got.Accounts, stored.Accounts)
	require.True(t, stored.Finished)
	got.Candidates = stored.Candidates
	require.Equal(t, steps, got.Steps, "one committed step per bucket range: none repeated")
	require.Equal(t, want.Accounts, got.Accounts, "every account counted once")
	require.Equal(t, want.Totals, got.Totals, "per-slot totals equal the direct GROUP BY")
	require.Equal(t, want.SumSq, got.SumSq) //nolint:testifylint // exact: dyadic weights
	require.Equal(t, want.Candidates, got.Candidates, "the heaviest accounts equal ORDER BY weight DESC, id LIMIT k")
}

// failingCommits begins transactions on a pool; the commits listed fail
// (the transaction is rolled back instead), as if the process died after
// the step's work and before its commit.
type failingCommits struct {
	pool  *pgxpool.Pool
	mu    sync.Mutex
	calls int
	fail  map[int]bool
}

var errCrash = errors.New("simulated crash before commit")

type crashTx struct {
	pgx.Tx
	crash bool
}

func (tx crashTx) Commit(ctx context.Context) error {
	if tx.crash {
		_ = tx.Rollback(ctx)
		return errCrash
	}
	return tx.Tx.Commit(ctx)
}

func (f *failingCommits) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return crashTx{Tx: tx, crash: f.fail[f.calls]}, nil
}

// TestCensusResumesAfterCrash takes a census in steps that stop and crash:
// a run stopped between steps, steps whose transaction dies before its
// commit (their work rolled back), and a fresh run that carries on from
// next_bucket. The finished census equals one direct GROUP BY and ORDER BY
// over the table: no bucket counted twice or skipped. It keeps 25
// candidates, so merging trims at every step.
func TestCensusResumesAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, spec := weightedTask(t, dyadicWeights)
	const k = 25
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	// Begin calls 3, 42, 43 and 100 die before their commit.
	db := &failingCommits{pool: pool, fail: map[int]bool{3: true, 42: true, 43: true, 100: true}}
	// 40 steps (one of them crashing and taken again), then the process
	// stops.
	taken := 0
	for taken < 40 {
		c, counted, err := step(ctx, db, spec, start, time.Time{}, k, 0)
		if errors.Is(err, errCrash) {
			continue
		}
		require.NoError(t, err)
		require.True(t, counted)
		require.Equal(t, taken+1, c.NextBucket, "each committed step counts the next bucket")
		taken++
	}
	// A crash in the middle of a step's transaction: nothing of it stays.
	_, _, err := step(ctx, db, spec, start, time.Time{}, k, 0)
	require.ErrorIs(t, err, errCrash)
	_, _, err = step(ctx, db, spec, start, time.Time{}, k, 0)
	require.ErrorIs(t, err, errCrash)

	// A fresh run (another process) carries on from next_bucket; it hits
	// one more crash and stops there, and a third run finishes.
	c, steps, err := run(ctx, db, spec, start, time.Time{}, time.Time{}, k, false)
	require.ErrorIs(t, err, errCrash)
	require.Equal(t, 100-44, steps)
	require.Equal(t, 40+steps, c.NextBucket)
	c, more, err := run(ctx, db, spec, start, time.Time{}, time.Time{}, k, false)
	require.NoError(t, err)
	requireCensus(ctx, t, pool, spec, direct(ctx, t, pool, spec, k), c, 256)
	require.Equal(t, 256, c.NextBucket, "every bucket counted")
	require.Equal(t, 256-40-steps, more)

	// Finished: a further step changes nothing.
	again, counted, err := step(ctx, pool, spec, start, time.Time{}, k, 0)
	require.NoError(t, err)
	require.False(t, counted)
	require.Equal(t, c.Totals, again.Totals)
	require.Equal(t, c.Steps, again.Steps)
}

// TestCensusConcurrentRuns runs the same census from two runs at once (the
// census job and a bootstrap that found none finished): steps serialize on
// the census row, so each bucket is still counted once.
func TestCensusConcurrentRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, spec := weightedTask(t, dyadicWeights)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const k = 25
	var (
		wg    sync.WaitGroup
		steps [2]int
		errs  [2]error
	)
	for i := range 2 {
		wg.Go(func() { _, steps[i], errs[i] = run(ctx, pool, spec, start, time.Time{}, time.Time{}, k, false) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
	require.Equal(t, 256, steps[0]+steps[1], "the two runs took 256 steps between them")
	c, _, err := step(ctx, pool, spec, start, time.Time{}, k, 0)
	require.NoError(t, err)
	requireCensus(ctx, t, pool, spec, direct(ctx, t, pool, spec, k), c, 256)
}

// TestCensusTwoByteBuckets takes the census of a 65,536-bucket task (16
// slots, 256 buckets a step) with its own bucket expression.
func TestCensusTwoByteBuckets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, _ := weightedTask(t, dyadicWeights)
	spec := riverslottest.SpecBuckets(t, "fine", schema, "accounts", "", 16*time.Second, 100, slotplan.BucketsTwoByte)
	spec.Weight, spec.WeightEpsilon = "weight", 0.1
	spec.BuildSQL()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, steps, err := run(ctx, pool, spec, start, time.Time{}, time.Time{}, 1000, false)
	require.NoError(t, err)
	require.Equal(t, 256, steps)
	require.Equal(t, slotplan.BucketsTwoByte, c.NextBucket, "every bucket counted")
	requireCensus(ctx, t, pool, spec, direct(ctx, t, pool, spec, 1000), c, 256)

	// A shifted task (Phase): totals by the slot serving each bucket.
	shifted := *spec
	shifted.Name, shifted.Shift = "fine_shifted", 5
	shifted.PlanID = taskspec.PlanID(shifted.Plan, shifted.Seed, shifted.Shift)
	shifted.BuildSQL()
	// Its steps widen while they are fast (Run): still every bucket once.
	c, steps, err = run(ctx, pool, &shifted, start, time.Time{}, time.Time{}, 1000, true)
	require.NoError(t, err)
	require.Equal(t, slotplan.BucketsTwoByte, c.NextBucket, "every bucket counted")
	requireCensus(ctx, t, pool, &shifted, direct(ctx, t, pool, &shifted, 1000), c, steps)
	t.Logf("widening steps: %d", steps)
}

// TestCensusPinsEqualDirect places the same fleet's pins twice per cycle,
// with a census (Place) and with the two full scans the bootstrap ran
// before censuses: threshold, pin count and every pin (account, bucket,
// slot, weight) are identical, for a first cycle (a giant and its
// neighbours evacuated, jumbos pinned) and a second one after weights
// changed (previous pins kept or released by hysteresis), its census
// taken ahead as the census job does.
func TestCensusPinsEqualDirect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, spec := weightedTask(t, dyadicWeights)
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	scan := *spec // the same plan and seed under another task name
	scan.Name = "direct"
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	type pin struct {
		ID     uuid.UUID
		Bucket int
		Slot   int
		Weight float64
	}
	pinsOf := func(task string, cycle time.Time) []pin {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT account_id, bucket, slot, weight FROM "+pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()+
			" WHERE task = $1 AND cycle_start = $2 ORDER BY account_id", task, cycle)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pin])
		require.NoError(t, err)
		return got
	}
	placeBoth := func(cycle time.Time) Outcome {
		t.Helper()
		var outs [2]Outcome
		for i, s := range []*taskspec.Spec{spec, &scan} {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			outs[i], err = place(ctx, tx, pool, s, cycle, s == &scan)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
		}
		require.Empty(t, outs[0].Fallback)
		require.NotNil(t, outs[0].Census, "the census path used a census")
		require.True(t, outs[0].Census.Finished)
		require.Equal(t, outs[1].Threshold, outs[0].Threshold)
		require.Equal(t, outs[1].Pinned, outs[0].Pinned)
		require.Equal(t, pinsOf("direct", cycle), pinsOf(spec.Name, cycle), "the same pins, account by account")
		return outs[0]
	}

	// Cycle 1: no census yet, so Place takes it inline (no PinsTimeout).
	first := placeBoth(start)
	require.Positive(t, first.InlineSteps)
	require.LessOrEqual(t, first.InlineSteps, 256, "at most 256 steps; fewer as they widen")
	require.Positive(t, first.Pinned)
	var giantNeighbours int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()+
		" WHERE task = $1 AND weight < 300", spec.Name).Scan(&giantNeighbours))
	require.Positive(t, giantNeighbours, "the giant's neighbours are pinned elsewhere")

	// New weights: half the jumbos lighter, some accounts heavier.
	_, err := pool.Exec(ctx, "UPDATE "+accounts+" SET weight = CASE WHEN weight = 300 THEN 50 ELSE weight * 2 END WHERE get_byte(uuid_send(id), 0) < 128")
	require.NoError(t, err)
	// Cycle 2: without a census of its own, Place would use cycle 1's
	// (weights read a cycle earlier); the census job takes it ahead.
	next := start.Add(spec.Plan.Cycle)
	c, steps, err := Run(ctx, pool, spec, next, time.Time{}, time.Time{})
	require.NoError(t, err)
	require.Equal(t, c.Steps, steps)
	require.True(t, c.Finished)
	second := placeBoth(next)
	require.Zero(t, second.InlineSteps, "the census taken ahead was used")
	require.True(t, next.Equal(second.Census.CycleStart))
}

// TestPlaceFallsBackWhileTheCensusIsUnfinished: a cycle whose census cannot
// be taken within PinsTimeout (the accounts table is locked) falls back to
// hash placement, keeps no census progress it did not commit, and says the
// census is pending; once the census is finished the next cycle computes
// its pins from it without a step of its own, leaving out the accounts
// deleted since the census.
func TestPlaceFallsBackWhileTheCensusIsUnfinished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, spec := weightedTask(t, heavy60)
	spec.PinsTimeout = 500 * time.Millisecond
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	lock := lockTable(ctx, t, pool, accounts)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	o, err := Place(ctx, tx, pool, spec, start)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, lock.Rollback(ctx))
	require.Equal(t, FallbackHash, o.Fallback)
	require.True(t, o.CensusPending(), "%+v", o)
	require.Zero(t, o.InlineSteps)

	// The census job's work: from where the census stands.
	c, _, err := Run(ctx, pool, spec, start, time.Time{}, time.Time{})
	require.NoError(t, err)
	require.True(t, c.Finished)
	require.Equal(t, 256, c.NextBucket)

	// 5 of the 60 jumbos are deleted after the census: they are not
	// pinned (the census's candidates are read again, with today's
	// weights).
	_, err = pool.Exec(ctx, "DELETE FROM "+accounts+" WHERE id IN (SELECT id FROM "+accounts+" WHERE weight = 150 ORDER BY id LIMIT 5)")
	require.NoError(t, err)
	spec.PinsTimeout = 10 * time.Second // the lock made the first fall back; no deadline race here
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	o, err = Place(ctx, tx, pool, spec, start.Add(spec.Plan.Cycle))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Empty(t, o.Fallback)
	require.Equal(t, 55, o.Pinned, "the 55 jumbos left, not the 5 deleted since the census")
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()+
		" p WHERE NOT EXISTS (SELECT 1 FROM "+accounts+" a WHERE a.id = p.account_id)"), "no deleted account pinned")
	require.Zero(t, o.InlineSteps)
	require.True(t, start.Equal(o.Census.CycleStart), "the pins come from the census of the cycle before")
	require.False(t, o.CensusPending())
}

// TestPlaceDirectUpToDirectMax: a fleet of at most DirectMax accounts has
// its pins computed directly (no census row, no census job needed); one
// account more and the same pins come from a census.
func TestPlaceDirectUpToDirectMax(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, spec := weightedTask(t, heavy60) // 2,060 accounts
	spec.DirectMax = 2060
	over := *spec // the same plan and seed under another task name
	over.Name, over.DirectMax = "over", 2059
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	census := pgx.Identifier{schema, taskspec.PinCensusTable}.Sanitize()
	pins := pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()

	placeOne := func(s *taskspec.Spec) Outcome {
		t.Helper()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		o, err := Place(ctx, tx, pool, s, start)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Empty(t, o.Fallback)
		require.Equal(t, 60, o.Pinned)
		return o
	}
	o := placeOne(spec)
	require.True(t, o.Direct, "2,060 accounts, DirectMax 2,060: direct")
	require.Nil(t, o.Census)
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+census), "no census taken")

	o = placeOne(&over)
	require.False(t, o.Direct, "2,060 accounts, DirectMax 2,059: a census")
	require.NotNil(t, o.Census)
	require.True(t, o.Census.Finished)
	require.Positive(t, o.InlineSteps)
	require.EqualValues(t, 1, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+census+" WHERE task = 'over'"))
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM (SELECT account_id, slot FROM "+pins+" WHERE task = $1 "+
		"EXCEPT SELECT account_id, slot FROM "+pins+" WHERE task = 'over') d", spec.Name), "the same pins either way")

	// A second bootstrap of the cycle reuses the decision and still knows
	// the fleet is small.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	o, err = Place(ctx, tx, pool, spec, start)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.True(t, o.Reused)
	require.True(t, o.Direct)
}

// TestPlaceSmallFleetCountTimesOut: a fleet count that cannot finish within
// its share of PinsTimeout (the table is locked) counts as a large fleet:
// the bootstrap goes on to its census, which the lock holds too, so the
// cycle falls back with its census pending for the census job (not with
// nothing to carry on), and the transaction stays usable.
func TestPlaceSmallFleetCountTimesOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema, spec := weightedTask(t, heavy60)
	spec.DirectMax, spec.PinsTimeout = 1_000_000, 2*time.Second
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()

	lock := lockTable(ctx, t, pool, accounts)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	o, err := Place(ctx, tx, pool, spec, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	var one int
	require.NoError(t, tx.QueryRow(ctx, "SELECT 1").Scan(&one), "the transaction is usable")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, lock.Rollback(ctx))
	require.False(t, o.Direct)
	require.Equal(t, FallbackHash, o.Fallback)
	require.True(t, o.CensusPending(), "%+v", o)
}

// TestPlaceSmallFleetWithACensusUsesIt: a small fleet with a finished census
// (taken after a direct computation ran out of time, or while the fleet was
// larger) computes its pins from it rather than scanning.
func TestPlaceSmallFleetWithACensusUsesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, spec := weightedTask(t, heavy60)
	spec.DirectMax = 1_000_000
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, _, err := Run(ctx, pool, spec, start, time.Time{}, time.Time{})
	require.NoError(t, err)
	require.True(t, c.Finished)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	o, err := Place(ctx, tx, pool, spec, start)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.False(t, o.Direct)
	require.Empty(t, o.Fallback)
	require.NotNil(t, o.Census)
	require.Zero(t, o.InlineSteps, "the finished census was used")
	require.Equal(t, 60, o.Pinned)
}

// lockTable locks table (quoted) in ACCESS EXCLUSIVE mode in a transaction
// of its own, which the caller rolls back to release it.
func lockTable(ctx context.Context, t *testing.T, pool *pgxpool.Pool, table string) pgx.Tx {
	t.Helper()
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	return lock
}
