package ledger

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Outcome is how a sync job ended, as its cycle's row counts it.
type Outcome int

// The outcomes a cycle's row counts. A sync job that River retries or
// snoozes has not ended and is not counted.
const (
	// OutcomeSynced: Sync returned nil.
	OutcomeSynced Outcome = iota
	// OutcomeGone: the account was gone or filtered out; Sync was not
	// called.
	OutcomeGone
	// OutcomeStale: the job started after its NotAfter; Sync was not
	// called (the next cycle covers the account).
	OutcomeStale
	// OutcomeUpstream: the account's upstream had no room for it (rate
	// limit, pause or open breaker) before its NotAfter.
	OutcomeUpstream
	// OutcomeFailed: its last attempt failed (River discards the job).
	OutcomeFailed
	// OutcomeCancelled: the job was cancelled (JobCancel).
	OutcomeCancelled

	outcomes = iota
)

// outcomeColumns are the cycle row's counter columns, by Outcome.
var outcomeColumns = [outcomes]string{"synced", "gone", "stale", "upstream_skipped", "failed", "cancelled"}

// LatenessBuckets is how many buckets a cycle's lateness histogram has:
// bucket 0 holds lateness under 1 ms, bucket i (1 <= i < LatenessBuckets-1)
// lateness in [LatenessBound(i-1), LatenessBound(i)), the last one 10,000 s
// and more. The bounds grow by 10^(1/10) (26%) a bucket.
const LatenessBuckets = 72

// LatenessBound returns the upper bound of lateness bucket i: 10^(-3 +
// i/10) seconds, for i in [0, LatenessBuckets-2].
func LatenessBound(i int) time.Duration {
	return time.Duration(math.Pow(10, -3+float64(i)/10) * float64(time.Second))
}

// Histogram counts a cycle's synced syncs by lateness (started minus
// scheduled).
type Histogram [LatenessBuckets]int64

// bucketOf returns the bucket of lateness d.
func bucketOf(d time.Duration) int {
	if d < time.Millisecond {
		return 0
	}
	i := int(math.Floor(10*(math.Log10(d.Seconds())+3))) + 1
	// Guard the floating point at the bounds.
	for i > 1 && d < LatenessBound(i-1) {
		i--
	}
	for i < LatenessBuckets-1 && d >= LatenessBound(i) {
		i++
	}
	return min(i, LatenessBuckets-1)
}

// Add counts one sync of lateness d.
func (h *Histogram) Add(d time.Duration) { h[bucketOf(d)]++ }

// Count returns how many syncs h counts.
func (h *Histogram) Count() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile returns the q-quantile (0 < q < 1) of the lateness h counts,
// interpolated linearly inside its bucket (at most 26% from the true
// value), and false when h counts nothing.
func (h *Histogram) Quantile(q float64) (time.Duration, bool) {
	n := h.Count()
	if n == 0 {
		return 0, false
	}
	rank := q * float64(n)
	var seen float64
	for i, c := range h {
		if c == 0 || seen+float64(c) < rank {
			seen += float64(c)
			continue
		}
		var lo, hi time.Duration
		switch {
		case i == 0:
			lo, hi = 0, time.Millisecond
		case i == LatenessBuckets-1:
			return LatenessBound(i - 1), true
		default:
			lo, hi = LatenessBound(i-1), LatenessBound(i)
		}
		f := (rank - seen) / float64(c)
		return lo + time.Duration(f*float64(hi-lo)), true
	}
	return LatenessBound(LatenessBuckets - 2), true
}

// Outcomes are a cycle's counted sync outcomes: how many ended each way
// (by Outcome) and the lateness of the synced ones.
type Outcomes struct {
	Count    [outcomes]int64
	Lateness Histogram
}

// Synced, Gone, Stale, Upstream, Failed and Cancelled return the counts.
func (o *Outcomes) Synced() int64    { return o.Count[OutcomeSynced] }
func (o *Outcomes) Gone() int64      { return o.Count[OutcomeGone] }
func (o *Outcomes) Stale() int64     { return o.Count[OutcomeStale] }
func (o *Outcomes) Upstream() int64  { return o.Count[OutcomeUpstream] }
func (o *Outcomes) Failed() int64    { return o.Count[OutcomeFailed] }
func (o *Outcomes) Cancelled() int64 { return o.Count[OutcomeCancelled] }

// Ended returns how many sync jobs of the cycle ended, every way.
func (o *Outcomes) Ended() int64 {
	var n int64
	for _, c := range o.Count {
		n += c
	}
	return n
}

func (o *Outcomes) add(p *Outcomes) {
	for i := range o.Count {
		o.Count[i] += p.Count[i]
	}
	for i := range o.Lateness {
		o.Lateness[i] += p.Lateness[i]
	}
}

// CycleKey names one cycle's row.
type CycleKey struct {
	Task, Plan string
	Start      time.Time
}

// TallyInterval is how often a Tally writes what it counted.
const TallyInterval = 500 * time.Millisecond

// Tally counts the outcomes of a node's sync jobs per cycle and adds them
// to the cycles' rows every TallyInterval, one statement for every cycle
// counted meanwhile: the ledger, not River's job table (which may have
// deleted the jobs), is what Status and the history read. Counts not yet
// written when a node is killed are lost (at most TallyInterval's worth
// per node); a job River runs again after a crash may be counted twice.
type Tally struct {
	// Exec runs the update; riverslot sets it to River's pool.
	Exec func(ctx context.Context, sql string, args ...any) error
	// OnError is told of a failed write (its counts are kept for the next,
	// unless the ledger is missing or outdated: then they are dropped).
	OnError func(error)

	mu      sync.Mutex
	pending map[tallyKey]*Outcomes
	timer   *time.Timer
	gen     int // of timer: a write it started may not clear a newer one

	flushMu sync.Mutex // one write at a time
}

type tallyKey struct {
	schema string // River's, whose ledger holds the cycle's row
	CycleKey
}

// Add counts one outcome of a sync job of cycle key in the ledger of
// River's schema, and lateness when it synced.
func (t *Tally) Add(schema string, key CycleKey, o Outcome, lateness time.Duration) {
	k := tallyKey{schema: schema, CycleKey: CycleKey{Task: key.Task, Plan: key.Plan, Start: key.Start.UTC()}}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending == nil {
		t.pending = make(map[tallyKey]*Outcomes)
	}
	p := t.pending[k]
	if p == nil {
		p = new(Outcomes)
		t.pending[k] = p
	}
	p.Count[o]++
	if o == OutcomeSynced {
		p.Lateness.Add(lateness)
	}
	t.armLocked()
}

// armLocked starts the timer of the next write unless one runs; t.mu held.
func (t *Tally) armLocked() {
	if t.timer != nil {
		return
	}
	t.gen++
	gen := t.gen
	t.timer = time.AfterFunc(TallyInterval, func() { t.flushLater(gen) })
}

func (t *Tally) flushLater(gen int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := t.flush(ctx)
	t.mu.Lock()
	if t.gen == gen {
		t.timer = nil
		if len(t.pending) > 0 {
			t.armLocked()
		}
	}
	t.mu.Unlock()
	if err != nil && t.OnError != nil {
		t.OnError(err)
	}
}

// tallySQL adds the counts of its rows ($1 task, $2 cycle start, $3 plan,
// then one bigint[] per outcome, then the histograms as text) to the
// cycles' rows.
func tallySQL(table string) string {
	var b strings.Builder
	b.WriteString("UPDATE " + table + " c SET ")
	for _, col := range outcomeColumns {
		b.WriteString(col + " = coalesce(c." + col + ", 0) + v." + col + ", ")
	}
	b.WriteString("lateness = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0) FROM unnest(c.lateness, v.lateness::bigint[]) WITH ORDINALITY u(a, b, i) ORDER BY i)")
	b.WriteString(" FROM unnest($1::text[], $2::timestamptz[], $3::text[]")
	for i := range outcomeColumns {
		b.WriteString(", $" + strconv.Itoa(4+i) + "::bigint[]")
	}
	b.WriteString(", $" + strconv.Itoa(4+outcomes) + "::text[]) v(task, cycle_start, plan, " + strings.Join(outcomeColumns[:], ", ") + ", lateness)")
	b.WriteString(" WHERE c.task = v.task AND c.cycle_start = v.cycle_start AND c.plan = v.plan AND c.slot = " + strconv.Itoa(BootstrapSlot))
	return b.String()
}

// Flush writes what t counted now, one statement per ledger (two nodes'
// statements that lock the same rows in another order deadlock; PostgreSQL
// aborts one, whose counts are kept for its next write), and stops the timer of the next write (an Add starts it
// again): after the last job, nothing of t runs later. Counts it could not
// write are kept for the next write.
func (t *Tally) Flush(ctx context.Context) error {
	t.mu.Lock()
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
		t.gen++ // a write the timer started already clears nothing
	}
	t.mu.Unlock()
	return t.flush(ctx)
}

func (t *Tally) flush(ctx context.Context) error {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	t.mu.Lock()
	pending := t.pending
	t.pending = nil
	t.mu.Unlock()
	if len(pending) == 0 || t.Exec == nil {
		return nil
	}
	keys := make([]tallyKey, 0, len(pending))
	for k := range pending {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b tallyKey) int {
		if c := strings.Compare(a.schema, b.schema); c != 0 {
			return c
		}
		if c := strings.Compare(a.Task, b.Task); c != 0 {
			return c
		}
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return strings.Compare(a.Plan, b.Plan)
	})
	var firstErr error
	for i := 0; i < len(keys); {
		j := i
		for j < len(keys) && keys[j].schema == keys[i].schema {
			j++
		}
		group := keys[i:j]
		args := make([]any, 4+outcomes)
		tasks, plans, hists := make([]string, len(group)), make([]string, len(group)), make([]string, len(group))
		starts := make([]time.Time, len(group))
		counts := make([][]int64, outcomes)
		for n, k := range group {
			tasks[n], plans[n], starts[n] = k.Task, k.Plan, k.Start
			p := pending[k]
			for o := range counts {
				counts[o] = append(counts[o], p.Count[o])
			}
			hists[n] = histText(&p.Lateness)
		}
		args[0], args[1], args[2] = tasks, starts, plans
		for o := range counts {
			args[3+o] = counts[o]
		}
		args[3+outcomes] = hists
		if err := t.Exec(ctx, tallySQL(New(keys[i].schema).table), args...); err != nil {
			err = wrap(err, "adding sync outcomes to the cycles' rows in the ledger")
			if firstErr == nil {
				firstErr = err
			}
			if errors.Is(err, ErrMissing) || errors.Is(err, ErrOutdated) {
				i = j // no row to add them to: dropped
				continue
			}
			t.mu.Lock()
			if t.pending == nil {
				t.pending = make(map[tallyKey]*Outcomes)
			}
			for _, k := range group {
				if q := t.pending[k]; q != nil {
					q.add(pending[k])
				} else {
					t.pending[k] = pending[k]
				}
			}
			t.mu.Unlock()
		}
		i = j
	}
	return firstErr
}

func histText(h *Histogram) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, c := range h {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(c, 10))
	}
	b.WriteByte('}')
	return b.String()
}
