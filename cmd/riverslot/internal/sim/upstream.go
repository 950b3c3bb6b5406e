package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/riverslot/riverslot/internal/testkit/measure"
)

// Upstreams spreads the simulated accounts over Count upstreams of uneven
// size, as `riverslot demo --upstreams` does (BankBounds), each held to the
// task's limits by a model of riverslot's limiter (internal/upstream's
// decide and Release, on the simulated clock) with the demo's breaker
// (BreakerThreshold failures, BreakerCooldown), and Down makes one of them
// fail every call for a part of each cycle.
type Upstreams struct {
	Count       int
	Rate        float64 // calls started per second per upstream; 0: none
	Burst       int     // default 1 with a Rate
	Concurrency int     // calls in flight per upstream; 0: none
	Down        *Down
}

// Down is one upstream failing every call from From to To, fractions of
// each cycle.
type Down struct {
	Bank     int
	From, To float64
}

// BankKey is the name of upstream k: bank-00, bank-01, ...
func BankKey(k int) string { return fmt.Sprintf("bank-%02d", k) }

// BankBounds splits the first UUID byte's 256 values over n banks in
// shares proportional to 1/(k+1), each at least one value: bank k holds
// the accounts whose first byte is below BankBounds(n)[k] and not below
// the bound before. The demo's SQL expression and the simulator both
// follow it.
func BankBounds(n int) []int {
	var h float64
	for k := range n {
		h += 1 / float64(k+1)
	}
	out := make([]int, n)
	lo := 0
	for k := range n {
		size := max(int(math.Round(256/float64(k+1)/h)), 1)
		hi := min(lo+size, 256-(n-1-k)) // leave a value for each bank after it
		if k == n-1 {
			hi = 256
		}
		out[k] = hi
		lo = hi
	}
	return out
}

// BreakerThreshold is the demo's (and the simulator's) Limits.
// FailureThreshold with --upstreams.
const BreakerThreshold = 3

// BreakerCooldown is the demo's Limits.Cooldown with --upstreams: 1/32 of
// the cycle, at least a second.
func BreakerCooldown(cycle time.Duration) time.Duration { return max(cycle/32, time.Second) }

// maxDelay is internal/upstream.MaxDelay: the longest a sync at the front
// of the line waits in process for its start.
const maxDelay = int64(time.Second)

// inProcessPerUpstream is syncjob.InProcessPerUpstream: how many syncs of
// one upstream may wait in process on a node at once.
const inProcessPerUpstream = 4

// holdMargin is syncjob's margin over SyncTimeout for a lease.
const holdMargin = 5 * time.Second

// UpstreamResult is one upstream over the simulated time; `riverslot demo
// --json` reports the same fields, measured, for each of its banks.
type UpstreamResult struct {
	Key              string  `json:"key"`
	Accounts         int64   `json:"accounts"`
	RateLimit        float64 `json:"rate_limit"`
	Burst            int     `json:"burst"`
	ConcurrencyLimit int     `json:"concurrency_limit"`
	MaxPerSecond     int     `json:"max_per_second"`
	MaxInFlight      int64   `json:"max_in_flight"`
	Calls            int64   `json:"calls"`
	Synced           int64   `json:"synced"`
	Throttled        int64   `json:"throttled"`
	Probes           int64   `json:"probes"`
	Deferred         int64   `json:"deferred"`
	Skipped          int64   `json:"skipped"`
	// LatenessP99Seconds is how late its calls started after their
	// accounts' regular times (99th percentile).
	LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
}

type breakerState uint8

const (
	closed breakerState = iota
	open
	halfOpen
)

// bank is one upstream's state, as riverslot_upstream holds it.
type bank struct {
	lineTAT, startTAT  int64 // math.MinInt64: none
	inFlight           int64
	state              breakerState
	failures           int
	openUntil          int64
	probeJob           int32 // -1: none
	probeUntil         int64
	calls, ends        []int64 // call start and end times
	res                UpstreamResult
	lateness           hist
	throttled, skipped int64
	inProcess          int // syncs waiting in process (one node)
}

// upstreamModel is the limiter of every bank.
type upstreamModel struct {
	cfg     Upstreams
	burst   int
	of      [256]uint16 // bank of a first UUID byte
	banks   []bank
	hold    int64
	cooldwn int64
}

func newUpstreamModel(cfg Upstreams, cycle, syncTimeout time.Duration) *upstreamModel {
	u := &upstreamModel{cfg: cfg, burst: cfg.Burst, banks: make([]bank, cfg.Count),
		hold: int64(syncTimeout + holdMargin), cooldwn: int64(BreakerCooldown(cycle))}
	if cfg.Rate > 0 && u.burst < 1 {
		u.burst = 1
	}
	lo := 0
	for k, hi := range BankBounds(cfg.Count) {
		for b := lo; b < hi; b++ {
			u.of[b] = uint16(k)
		}
		lo = hi
	}
	for k := range u.banks {
		b := &u.banks[k]
		b.lineTAT, b.startTAT, b.probeJob = math.MinInt64, math.MinInt64, -1
		b.res = UpstreamResult{Key: BankKey(k), RateLimit: cfg.Rate, Burst: u.burst, ConcurrencyLimit: cfg.Concurrency}
	}
	return u
}

// A job's flags in the limiter: what its row in riverslot_upstream_place
// (its place in line) records.
const (
	upReserved uint8 = 1 << iota // holds a place in line (job.reserved)
	upThrottled
	upDeferred
	upHeld // holds one of its upstream's in-process places
)

// What a sync job does after its decision.
const (
	upRun uint8 = iota
	upSnooze
	upSkip
)

type upDecision struct {
	verdict     uint8
	wait, delay int64
	probe       bool
	down        bool // a skip because the upstream was down
	concurrency bool // a wait for a lease: asked again in process
}

// decide is internal/upstream's decide on bank k for job i at now (its
// pause after a 429 is not modelled: the simulated upstreams never send
// one); it updates the bank and the job as record does.
func (u *upstreamModel) decide(k int, j *job, i int32, now, notAfter int64, noDelay bool) upDecision {
	b := &u.banks[k]
	var markT, markD bool
	finish := func(d upDecision) upDecision {
		if markT && j.upFlags&upThrottled == 0 {
			b.throttled++
			j.upFlags |= upThrottled
		}
		if markD && j.upFlags&upDeferred == 0 {
			b.res.Deferred++
			j.upFlags |= upDeferred
		}
		return d
	}
	skip := func(downReason bool) upDecision {
		b.skipped++
		d := upDecision{verdict: upSkip, down: downReason || j.upFlags&upDeferred != 0}
		j.upFlags = 0
		return d
	}
	waitUntil := func(t, spread int64, downReason bool) upDecision {
		if t > notAfter {
			return skip(downReason)
		}
		s := int64(0)
		if spread > 0 {
			// internal/upstream's spread: deadlines within 2 minutes
			// first, by deadline, the others at a place fixed per job.
			if left := notAfter - t; left < int64(2*time.Minute) {
				s = int64(max(float64(left)/float64(2*time.Minute), 0) * float64(spread) / 2)
			} else {
				s = int64((1 + float64(jobSeed(i)%1024)/1024) * float64(spread) / 2)
			}
			s = min(s, notAfter-t) // never woken past its NotAfter by the spread
		}
		return finish(upDecision{verdict: upSnooze, wait: max(t-now+s, int64(time.Millisecond))})
	}
	// leaseWait is internal/upstream's: asked again after w, or at the
	// sync's NotAfter when that comes first.
	leaseWait := func(w int64) upDecision {
		t := now + w
		if t > notAfter && now <= notAfter {
			t = notAfter
		}
		d := waitUntil(t, int64(100*time.Millisecond), false)
		d.concurrency = true
		return d
	}
	run := func(delay int64, probe bool) upDecision {
		b.inFlight++
		j.upFlags = 0 // the job's row is dropped when it runs
		return upDecision{verdict: upRun, delay: delay, probe: probe}
	}
	rate := u.cfg.Rate
	interval := int64(0)
	if rate > 0 {
		interval = int64(float64(time.Second) / rate)
	}
	probe := false
	switch b.state {
	case open:
		if b.openUntil > now {
			markD = true
			return waitUntil(b.openUntil, u.cooldwn, true)
		}
		probe = true
	case halfOpen:
		switch {
		case b.probeJob == i:
			probe = true
		case b.probeUntil > now:
			markD = true
			return waitUntil(now+min(max(int64(time.Second), u.cooldwn/4), b.probeUntil-now), u.cooldwn/4, true)
		default:
			probe = true
		}
	}
	if probe {
		b.state, b.probeJob, b.probeUntil = halfOpen, i, now+u.hold
		b.res.Probes++
		if rate > 0 {
			b.startTAT = max(now, b.startTAT) + interval
		}
		return run(0, true)
	}
	conc := int64(u.cfg.Concurrency)
	reserved := j.upFlags&upReserved != 0
	if rate > 0 {
		tolerance := int64(u.burst-1) * interval
		if reserved && j.reserved > now {
			return upDecision{verdict: upSnooze, wait: j.reserved - now}
		}
		joinAt := func(at int64) upDecision {
			if at > notAfter {
				return skip(false)
			}
			b.lineTAT = at + interval
			j.reserved = at
			j.upFlags |= upReserved
			markT = true
			return finish(upDecision{verdict: upSnooze, wait: max(at-now, int64(time.Millisecond))})
		}
		if !reserved && b.lineTAT > now {
			return joinAt(b.lineTAT)
		}
		start := max(now, b.startTAT)
		if allow := start - tolerance; allow > now {
			front := reserved || b.lineTAT <= now
			if front && !noDelay && allow-now <= maxDelay && allow <= notAfter {
				if conc > 0 && b.inFlight >= conc {
					markT = true
					return leaseWait(min(max(int64(100*time.Millisecond), interval), int64(time.Second)))
				}
				b.startTAT = start + interval
				return run(allow-now, false)
			}
			if reserved {
				return waitUntil(allow, 0, false)
			}
			return joinAt(max(allow, b.lineTAT))
		}
		if conc <= 0 || b.inFlight < conc {
			b.startTAT = start + interval
		}
	}
	if conc > 0 && b.inFlight >= conc {
		markT = true
		w := int64(100 * time.Millisecond)
		if rate > 0 {
			w = max(w, interval)
		}
		return leaseWait(min(w, int64(time.Second)))
	}
	return run(0, false)
}

// release is internal/upstream's Release of job i on bank k at now: the
// call's outcome moves the breaker. It returns how long the job waits for
// an open breaker (0: not deferred).
func (u *upstreamModel) release(k int, i int32, now int64, failed bool) int64 {
	b := &u.banks[k]
	b.inFlight = max(b.inFlight-1, 0)
	wasProbe := b.probeJob == i
	if failed {
		if BreakerThreshold > 0 && (b.state == closed && b.failures+1 >= BreakerThreshold || b.state == halfOpen && wasProbe) {
			b.state, b.openUntil = open, now+u.cooldwn
		}
		b.failures++
	} else {
		b.failures = 0
		b.res.Synced++
		if b.state == halfOpen && wasProbe {
			b.state = closed
		}
	}
	if wasProbe {
		b.probeJob, b.probeUntil = -1, 0
	}
	if failed && b.state == open && b.openUntil > now {
		return b.openUntil - now
	}
	return 0
}

// call records a call to bank k from t to end (its lateness is recorded
// when it succeeds, as the demo records it).
func (u *upstreamModel) call(k int, t, end int64) {
	b := &u.banks[k]
	b.calls = append(b.calls, t)
	b.ends = append(b.ends, end)
	b.res.Calls++
}

// isDown says whether bank k fails a call at t (from the first cycle
// start).
func (u *upstreamModel) isDown(k int, t int64, cycle time.Duration) bool {
	d := u.cfg.Down
	if d == nil || d.Bank != k {
		return false
	}
	frac := float64(((t%int64(cycle))+int64(cycle))%int64(cycle)) / float64(cycle)
	return frac >= d.From && frac < d.To
}

// results are the banks' figures; accounts counts each bank's accounts.
func (u *upstreamModel) results(accounts []account) []UpstreamResult {
	for i := range accounts {
		u.banks[u.of[accounts[i].id[0]]].res.Accounts++
	}
	out := make([]UpstreamResult, len(u.banks))
	for k := range u.banks {
		b := &u.banks[k]
		r := b.res
		r.MaxPerSecond = measure.PeakPerSecond(b.calls)
		r.MaxInFlight = mostAtOnce(b.calls, b.ends)
		r.Throttled, r.Skipped = b.throttled, b.skipped
		r.LatenessP99Seconds = b.lateness.quantile(0.99)
		out[k] = r
	}
	return out
}

// mostAtOnce is the most calls in flight at once, from their start and
// end times (a call ending when another starts does not overlap it).
func mostAtOnce(starts, ends []int64) int64 {
	starts, ends = slices.Clone(starts), slices.Clone(ends)
	slices.Sort(starts)
	slices.Sort(ends)
	var most, now int64
	j := 0
	for _, s := range starts {
		for j < len(ends) && ends[j] <= s {
			j++
			now--
		}
		now++
		most = max(most, now)
	}
	return most
}

// bankOf is account a's upstream.
func (e *engine) bankOf(a int32) int { return int(e.up.of[e.accounts[a].id[0]]) }

// concurrencyStep is syncjob's in-process wait before asking again for a
// lease after the tries-th one: 20 ms doubling, at most 200 ms.
func concurrencyStep(tries uint8) int64 {
	return min(int64(20*time.Millisecond)<<min(tries, 4), int64(200*time.Millisecond))
}

// upStart is the sync worker of a task with limits, from the start of job
// i at at: a sync past its NotAfter completes as stale (skipped by its
// upstream when the limiter held it), else the limiter decides (upDecide).
func (e *engine) upStart(i int32, at int64) {
	j := &e.jobs[i]
	k := e.bankOf(j.acct)
	if at > j.notAfter {
		if j.upFlags&(upDeferred|upThrottled) != 0 {
			e.up.banks[k].skipped++
		} else {
			e.m.skipped++ // stale, not held by its upstream
		}
		j.upFlags, j.upAct = 0, upSkip
		e.schedule(at+int64(e.cfg.JobOverhead), evDone, i, j.epoch)
		return
	}
	j.upTries, j.upWaited = 0, 0
	e.upDecide(i, at)
}

// upDecide is the limiter's decision for running job i at at: wait
// (snoozed, no attempt used; a wait for a lease is asked again in process
// first, for at most maxDelay, as syncjob does), skip, or call the
// upstream, after a delay when its start under the rate is a moment away.
func (e *engine) upDecide(i int32, at int64) {
	j := &e.jobs[i]
	overhead := int64(e.cfg.JobOverhead)
	k := e.bankOf(j.acct)
	b := &e.up.banks[k]
	held := j.upFlags&upHeld != 0
	if !held && b.inProcess < inProcessPerUpstream {
		held = true
		b.inProcess++
	}
	j.upFlags &^= upHeld
	d := e.up.decide(k, j, i, at, j.notAfter, !held)
	keep := false
	defer func() {
		if held && !keep {
			b.inProcess--
		} else if keep {
			j.upFlags |= upHeld
		}
	}()
	switch d.verdict {
	case upSnooze:
		if step := concurrencyStep(j.upTries); held && d.concurrency && j.upWaited+step <= maxDelay {
			j.upTries++
			j.upWaited += step
			keep = true
			e.schedule(at+step, evUpRetry, i, j.epoch)
			return
		}
		j.attempt--
		j.due = at + overhead + d.wait
		j.upAct = upSnooze
		e.schedule(at+overhead, evDone, i, j.epoch)
		return
	case upSkip:
		j.upAct = upSkip
		e.schedule(at+overhead, evDone, i, j.epoch)
		return
	}
	j.upAct = upRun
	callAt := at + overhead + d.delay
	if d.delay > 0 {
		keep = true // until the call starts
		e.schedule(callAt, evUpCall, i, j.epoch)
	}
	j.started = callAt
	e.m.start(callAt, j.regular)
	end := callAt + e.sample()
	e.up.call(k, callAt, end)
	e.schedule(end, evDone, i, j.epoch)
}

// upCalled gives back job i's in-process place once its call starts.
func (e *engine) upCalled(i int32) {
	j := &e.jobs[i]
	if j.upFlags&upHeld != 0 {
		j.upFlags &^= upHeld
		e.up.banks[e.bankOf(j.acct)].inProcess--
	}
}

// jobSeed is a job's fixed place among the others (splitmix64 of its
// index), as internal/upstream hashes the job's id.
func jobSeed(i int32) uint64 {
	z := uint64(i) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
