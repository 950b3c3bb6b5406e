package sim

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// River's timings the engine follows (river v0.51): the leader's job
// scheduler runs every 5 s and promotes jobs due within the next 5 s; the
// rescuer runs every 30 s; the producer's poll timer adds up to 10% jitter
// (at least 10 ms).
const (
	schedulerInterval = 5 * time.Second
	rescuerInterval   = 30 * time.Second
	priorities        = 4
)

type jobKind uint8

const (
	kindSync jobKind = iota
	kindPerSlot
	kindBootstrap
	kindControl // the naive enqueuer and the LRS poller
)

type jobState uint8

const (
	stScheduled jobState = iota
	stAvailable
	stRunning
	stRetryable
	stStuck // running when an outage began, waiting for the rescuer
	stDone
)

// job is one River job row.
type job struct {
	due     int64 // scheduled_at
	started int64 // attempted_at
	seq     uint64
	acct    int32 // sync: account index
	slot    int32 // per-slot: slot
	cycle   int32 // cycle index
	cursor  int32 // per-slot: accounts committed
	epoch   uint32
	task    uint8
	kind    jobKind
	prio    uint8
	attempt uint8
	state   jobState

	// A sync with upstreams: its first scheduled_at (due changes when it
	// snoozes), its NotAfter, its place in the limiter's line (upFlags'
	// upReserved), what it does after its decision, and its in-process
	// waits for a lease (how many, how long in all).
	regular, notAfter, reserved int64
	upWaited                    int64
	upFlags, upAct, upTries     uint8
}

// account is one row of the accounts table.
type account struct {
	id [16]byte
}

// idKey is the id's first 8 bytes, for "ORDER BY id".
func (a *account) idKey() uint64 { return binary.BigEndian.Uint64(a.id[:8]) }

type engine struct {
	cfg      *Config
	strategy Strategy
	specs    []*taskspec.Spec
	rng      *rand.Rand
	label    string // Progress's

	// A shard's (RunShards; nil for one database): the buckets it owns,
	// whose accounts churn draws, and the slots its bootstrap enqueues.
	own      *bucketSet
	ownSlots []bool

	base   time.Time // t = 0: the first cycle start
	now    int64
	end    int64 // Duration: no cycle starts at or after it
	seq    uint64
	events minHeap[event]
	gen    int32 // bumped by a restart: stale timers are ignored

	jobs []job
	free []int32

	scheduled minHeap[jobKey] // scheduled and retryable
	available [priorities + 1]minHeap[jobKey]

	// producer
	down          bool
	active        int
	lastFetch     int64
	fetchPending  bool
	fetchWhenFree bool
	notifyPending bool

	// fleet
	accounts []account
	slotOf   [][]int32 // per task... by bucket slot: accounts in keyset order
	cycles   []int64   // cycle starts

	// lrs
	lrs        minHeap[lrsEntry]
	lrsVer     []uint32
	lastSynced []int64
	enqueuedAt []int64
	lrsRetry   []lrsEntry // taken accounts, re-eligible a quarter cycle later
	lrsK       int

	// fanOut holds each per-slot job's accounts in keyset order, taken
	// when its first attempt starts.
	fanOut map[int32][]int32

	up *upstreamModel // nil without Config.Upstreams

	bootstrapped map[[2]int]bool // (task, cycle) bootstraps inserted
	enqueued     map[int]bool    // naive: cycles enqueued

	m *metrics
}

func (e *engine) at(t int64) time.Time { return e.base.Add(time.Duration(t)) }
func (e *engine) since(t time.Time) int64 {
	return int64(t.Sub(e.base))
}

func (e *engine) schedule(t int64, kind evKind, a int32, b uint32) {
	e.seq++
	e.events.push(event{t: t, seq: e.seq, kind: kind, a: a, b: b})
}

func (e *engine) newJob(j job) int32 {
	e.seq++
	j.seq = e.seq
	if n := len(e.free); n > 0 {
		i := e.free[n-1]
		e.free = e.free[:n-1]
		e.jobs[i] = j
		return i
	}
	e.jobs = append(e.jobs, j)
	return int32(len(e.jobs) - 1)
}

// insert adds a job due at due: scheduled when in the future, else
// available at once with an insert notification, as River does.
func (e *engine) insert(j job) {
	st := stScheduled
	if j.due <= e.now {
		st = stAvailable
	}
	j.state = st
	i := e.newJob(j)
	if j.kind == kindSync {
		e.m.add(e.now, st)
	}
	e.push(i)
	if st == stAvailable {
		e.notify()
	}
}

// notify is River's insert notification: at most one on its way (the
// producer's fetch limiter would merge them anyway).
func (e *engine) notify() {
	if !e.notifyPending {
		e.notifyPending = true
		e.schedule(e.now+int64(e.cfg.NotifyLatency), evFetchTrigger, 0, 0)
	}
}

// move changes job i's state to st (available, scheduled or retryable)
// and puts it in that state's set.
func (e *engine) move(i int32, st jobState) {
	j := &e.jobs[i]
	if j.kind == kindSync {
		e.m.move(e.now, j.state, st)
	}
	j.state = st
	e.push(i)
}

func (e *engine) push(i int32) {
	j := &e.jobs[i]
	key := jobKey{due: j.due, seq: j.seq, job: i}
	if j.state == stAvailable {
		e.available[j.prio].push(key)
	} else {
		e.scheduled.push(key)
	}
}

// run simulates until every cycle's jobs are done, or ctx is done.
func (e *engine) run(ctx context.Context) error {
	cfg := e.cfg
	e.end = int64(cfg.Duration)
	for t := int64(0); t < e.end; t += int64(cfg.Cycle) {
		e.cycles = append(e.cycles, t)
	}
	lead := time.Duration(0)
	for _, s := range e.specs {
		lead = max(lead, s.TriggerLead)
	}
	start := -int64(lead + 500*time.Millisecond)
	e.now = start
	e.lastFetch = math.MinInt64 / 2
	e.startClient()
	for k := 1; k < len(e.cycles); k++ {
		e.schedule(e.cycles[k], evCycle, int32(k), 0)
	}
	if o := cfg.Outage; o != nil {
		e.schedule(int64(o.Start), evOutageStart, 0, 0)
		e.schedule(int64(o.Start+o.Length), evOutageEnd, 0, 0)
	}
	e.schedule(0, evSample, 0, 0)

	progressStep := max(e.end/100, 1)
	nextProgress := int64(0)
	for n := 0; len(e.events) > 0; n++ {
		if n%(1<<16) == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		ev := e.events.pop()
		e.now = ev.t
		if cfg.Progress != nil && e.now >= nextProgress && e.now <= e.end {
			cfg.Progress(e.label, time.Duration(e.now), cfg.Duration)
			nextProgress = e.now + progressStep
		}
		switch ev.kind {
		case evTick:
			if ev.a == e.gen && !e.down {
				e.tick()
				if e.busy() {
					e.schedule(e.now+int64(schedulerInterval), evTick, e.gen, 0)
				}
			}
		case evPoll:
			if ev.a == e.gen && !e.down {
				e.triggerFetch()
				if e.busy() {
					jitter := max(cfg.FetchPollInterval/10, 10*time.Millisecond)
					e.schedule(e.now+int64(cfg.FetchPollInterval)+e.rng.Int64N(int64(jitter)), evPoll, e.gen, 0)
				}
			}
		case evFetchTrigger:
			e.notifyPending = false
			if !e.down {
				e.triggerFetch()
			}
		case evFetch:
			e.fetchPending = false
			if !e.down {
				e.fetch()
			}
		case evDone:
			if j := &e.jobs[ev.a]; j.epoch == ev.b && j.state == stRunning {
				e.done(ev.a)
			}
		case evBatch:
			if j := &e.jobs[ev.a]; j.epoch == ev.b && j.state == stRunning {
				e.batch(ev.a)
			}
		case evUpRetry:
			if j := &e.jobs[ev.a]; j.epoch == ev.b && j.state == stRunning {
				e.upDecide(ev.a, e.now)
			}
		case evUpCall:
			if j := &e.jobs[ev.a]; j.epoch == ev.b && j.state == stRunning {
				e.upCalled(ev.a)
			}
		case evTrigger:
			if ev.b == uint32(e.gen) && !e.down {
				e.trigger(int(ev.a))
			}
		case evCycle:
			e.churn()
		case evRescue:
			e.rescue(ev.a)
		case evOutageStart:
			e.outageStart()
		case evOutageEnd:
			e.down = false
			e.gen++
			e.startClient()
		case evSample:
			e.m.sample(e.now)
			if e.now < e.end || e.busy() {
				e.schedule(e.now+int64(cfg.Interval), evSample, 0, 0)
			}
		}
	}
	e.m.finish(e.now)
	return nil
}

// busy says whether the run still has work: before the end, or jobs left.
func (e *engine) busy() bool {
	if e.now < e.end {
		return true
	}
	if e.active > 0 || len(e.scheduled) > 0 {
		return true
	}
	for p := range e.available {
		if len(e.available[p]) > 0 {
			return true
		}
	}
	return false
}

// startClient starts the client at now: its scheduler, its poller and its
// periodic jobs (with RunOnStart where the strategy uses it).
func (e *engine) startClient() {
	e.schedule(e.now, evTick, e.gen, 0)
	e.schedule(e.now, evPoll, e.gen, 0)
	switch e.strategy {
	case StrategyRiverslot:
		for ti, s := range e.specs {
			// RunOnStart: the cycle starting within the trigger lead (plus a
			// second) of now, else the current one.
			k := e.cycleAt(e.now + int64(s.TriggerLead+time.Second))
			if k >= 0 {
				e.bootstrap(ti, k)
			}
			e.nextTrigger(ti, k+1)
		}
	case StrategyNaive:
		k := e.cycleAt(e.now)
		if k >= 0 && e.now > 0 {
			e.naiveEnqueue(k) // RunOnStart after an outage
		}
		e.nextTrigger(0, k+1)
	case StrategyLRS:
		e.schedule(e.now, evTrigger, 0, uint32(e.gen))
	}
}

// cycleAt is the index of the cycle containing t, or -1 before the first
// and len(cycles) - 1 after the last.
func (e *engine) cycleAt(t int64) int {
	k, found := slices.BinarySearch(e.cycles, t)
	if found {
		return k
	}
	return k - 1
}

// nextTrigger schedules the periodic trigger of task ti for cycle k.
func (e *engine) nextTrigger(ti, k int) {
	if k >= len(e.cycles) {
		return
	}
	t := e.cycles[k]
	if e.strategy == StrategyRiverslot {
		t -= int64(e.specs[ti].TriggerLead)
	}
	e.schedule(t, evTrigger, int32(ti), uint32(e.gen))
}

func (e *engine) trigger(ti int) {
	switch e.strategy {
	case StrategyRiverslot:
		k := e.cycleAt(e.now + int64(e.specs[ti].TriggerLead))
		e.bootstrap(ti, k)
		e.nextTrigger(ti, k+1)
	case StrategyNaive:
		k := e.cycleAt(e.now)
		e.naiveEnqueue(k)
		e.nextTrigger(0, k+1)
	case StrategyLRS:
		if e.now >= 0 && e.now < e.end {
			e.insert(job{kind: kindControl, prio: 1, due: e.now})
		}
		if e.now < e.end {
			e.schedule(e.now+int64(e.cfg.Cycle/60), evTrigger, 0, uint32(e.gen))
		}
	}
}

// bootstrap inserts the bootstrap job of task ti's cycle k, once (River's
// unique insert).
func (e *engine) bootstrap(ti, k int) {
	if e.bootstrapped[[2]int{ti, k}] {
		return
	}
	e.bootstrapped[[2]int{ti, k}] = true
	e.insert(job{kind: kindBootstrap, task: uint8(ti), cycle: int32(k), prio: uint8(e.specs[ti].ControlPriority), due: e.now})
}

// naiveEnqueue inserts the naive enqueuer's job of cycle k, once: one
// InsertManyFast of every account, whose jobs become visible when it
// commits (naiveInsert).
func (e *engine) naiveEnqueue(k int) {
	if k < 0 || e.enqueued[k] {
		return
	}
	e.enqueued[k] = true
	e.insert(job{kind: kindControl, prio: 1, cycle: int32(k), due: e.now})
}

func (e *engine) naiveInsert(k int32) {
	cs := e.cycles[k]
	for i := range e.accounts {
		off := slotplan.OffsetIn(slotplan.Hash(1, e.accounts[i].id), e.cfg.Cycle)
		e.insert(job{kind: kindSync, acct: int32(i), cycle: k, prio: 1, due: cs + int64(off)})
	}
}

// tick is River's scheduler: promote scheduled and retryable jobs due
// within the next interval; notify the producer when one is due already.
func (e *engine) tick() {
	horizon := e.now + int64(schedulerInterval)
	notify := false
	for len(e.scheduled) > 0 && e.scheduled[0].due <= horizon {
		k := e.scheduled.pop()
		e.move(k.job, stAvailable)
		if k.due <= e.now+int64(5*time.Millisecond) {
			notify = true
		}
	}
	if notify {
		e.notify()
	}
}

// triggerFetch is River's debounced fetch limiter: a call fires at once
// when the last fetch was at least a cooldown ago, else once at the end of
// the cooldown.
func (e *engine) triggerFetch() {
	if e.fetchPending {
		return
	}
	e.fetchPending = true
	e.schedule(max(e.now, e.lastFetch+int64(e.cfg.FetchCooldown)), evFetch, 0, 0)
}

// fetch locks up to MaxWorkers - active available jobs due by the query's
// now, by priority, scheduled_at and id, and starts them.
func (e *engine) fetch() {
	e.lastFetch = e.now
	limit := e.cfg.Workers - e.active
	if limit <= 0 {
		e.fetchWhenFree = true
		return
	}
	queryNow := e.now + int64(e.cfg.FetchLatency)/2
	start := e.now + int64(e.cfg.FetchLatency)
	n := 0
	for p := 1; p <= priorities && n < limit; p++ {
		h := &e.available[p]
		for n < limit && len(*h) > 0 && (*h)[0].due <= queryNow {
			k := h.pop()
			e.start(k.job, start)
			n++
		}
	}
	if n == limit {
		e.fetchWhenFree = true
	}
}

func (e *engine) start(i int32, at int64) {
	j := &e.jobs[i]
	if j.kind == kindSync {
		e.m.move(e.now, j.state, stRunning)
		if e.up == nil {
			e.m.start(at, j.due)
		}
	}
	j.state = stRunning
	j.attempt++
	j.started = at
	e.active++
	e.m.busy(e.now, +1)
	var work int64
	switch j.kind {
	case kindSync:
		if e.up != nil {
			e.upStart(i, at)
			return
		}
		work = int64(e.cfg.JobOverhead) + e.sample()
	case kindBootstrap:
		work = int64(e.cfg.JobOverhead) + e.insertTime(e.slotsServed(e.specs[j.task].Plan))
	case kindControl:
		n := e.lrsK
		if e.strategy == StrategyNaive {
			n = len(e.accounts)
		}
		work = int64(e.cfg.JobOverhead) + e.insertTime(n)
	case kindPerSlot:
		if _, ok := e.fanOut[i]; !ok {
			spec := e.specs[j.task]
			e.fanOut[i] = slices.Clone(e.slotOf[spec.Plan.Shift(int(j.slot), -spec.Shift)])
		}
		e.schedule(at+int64(e.cfg.JobOverhead)+e.insertTime(e.batchLen(i)), evBatch, i, j.epoch)
		return
	}
	e.schedule(at+work, evDone, i, j.epoch)
}

// slotsServed is how many of plan's slots the bootstrap enqueues.
func (e *engine) slotsServed(plan slotplan.Plan) int {
	if e.ownSlots == nil {
		return plan.Slots
	}
	n := 0
	for _, own := range e.ownSlots {
		if own {
			n++
		}
	}
	return n
}

func (e *engine) batchLen(i int32) int {
	j := &e.jobs[i]
	return min(e.specs[j.task].BatchSize, len(e.fanOut[i])-int(j.cursor))
}

// insertTime is how long inserting n jobs takes at the measured rate.
func (e *engine) insertTime(n int) int64 {
	return int64(float64(n) / e.cfg.InsertRate * float64(time.Second))
}

func (e *engine) sample() int64 {
	d := e.cfg.SyncDuration
	switch d.Kind {
	case "uniform":
		return int64(d.A) + e.rng.Int64N(int64(d.B-d.A)+1)
	case "lognormal":
		return int64(float64(d.A) * math.Exp(d.sigma()*e.rng.NormFloat64()))
	}
	return int64(d.A)
}

// batch commits the next batch of a per-slot fan-out: each account placed
// by the task's spec (on time, spread late, or skipped), exactly as the
// per-slot worker does.
func (e *engine) batch(i int32) {
	j := &e.jobs[i]
	spec := e.specs[j.task]
	cs := e.at(e.cycles[j.cycle])
	slotStart := spec.Plan.SlotStart(cs, int(j.slot))
	now := e.at(e.now)
	n := e.batchLen(i)
	accts := e.fanOut[i]
	for _, a := range accts[j.cursor : int(j.cursor)+n] {
		id := e.accounts[a].id
		target, _, skip := spec.Place(now, cs, slotStart, slotplan.Hash(spec.Seed, id))
		if skip {
			e.m.skipped++
			continue
		}
		sj := job{kind: kindSync, task: j.task, acct: a, cycle: j.cycle, prio: uint8(spec.SyncOpts.Priority), due: e.since(target)}
		if e.up != nil {
			regular := spec.Regular(cs, int(j.slot), id)
			ce := cs.Add(spec.Plan.Cycle)
			sj.regular, sj.notAfter = sj.due, e.since(spec.NotAfter(cs, ce, regular, target))
		}
		e.insert(sj)
	}
	j = &e.jobs[i] // insert may grow the arena
	j.cursor += int32(n)
	if int(j.cursor) < len(accts) {
		e.schedule(e.now+e.insertTime(e.batchLen(i)), evBatch, i, j.epoch)
		return
	}
	e.done(i)
}

func (e *engine) done(i int32) {
	j := &e.jobs[i]
	e.active--
	e.m.busy(e.now, -1)
	if e.fetchWhenFree {
		e.fetchWhenFree = false
		e.triggerFetch()
	}
	switch j.kind {
	case kindBootstrap:
		spec := e.specs[j.task]
		cs := e.at(e.cycles[j.cycle])
		ti, k := j.task, j.cycle
		e.finish(i)
		for slot := range spec.Plan.Slots {
			if e.ownSlots != nil && !e.ownSlots[slot] {
				continue // another shard's
			}
			e.insert(job{kind: kindPerSlot, task: ti, cycle: k, slot: int32(slot), prio: uint8(spec.ControlPriority), due: e.since(spec.PerSlotStart(cs, slot))})
		}
	case kindControl:
		k := j.cycle
		e.finish(i)
		if e.strategy == StrategyNaive {
			e.naiveInsert(k)
		} else {
			e.lrsPoll()
		}
	case kindPerSlot:
		e.finish(i)
	case kindSync:
		maxAttempts := int(e.specs[0].SyncOpts.MaxAttempts)
		if e.up != nil {
			switch j.upAct {
			case upSnooze:
				e.retryAt(i)
				return
			case upSkip:
				e.m.move(e.now, stRunning, stDone)
				e.finish(i)
				return
			}
			k := e.bankOf(j.acct)
			failed := e.up.isDown(k, j.started, e.cfg.Cycle) || e.cfg.FailRate > 0 && e.rng.Float64() < e.cfg.FailRate
			if deferFor := e.up.release(k, i, e.now, failed); deferFor > 0 {
				// The breaker is open: the sync waits for it (snoozed,
				// no attempt used), marked deferred.
				e.m.failed++
				b := &e.up.banks[k]
				if j.upFlags&upDeferred == 0 {
					b.res.Deferred++
				}
				j.upFlags = upDeferred
				j.attempt--
				j.due = e.now + deferFor
				e.retryAt(i)
				return
			}
			if !failed {
				e.up.banks[k].lateness.add(max(j.started-j.regular, 0))
				e.m.complete(e.now, j.acct, int(j.task))
				e.finish(i)
				return
			}
		}
		if e.up != nil || e.cfg.FailRate > 0 && e.rng.Float64() < e.cfg.FailRate {
			e.m.failed++
			if int(j.attempt) < maxAttempts {
				j.due = e.now + retryDelay(e.rng, int(j.attempt))
				e.retryAt(i)
				return
			}
			e.m.discarded++
			e.m.move(e.now, stRunning, stDone)
			e.finish(i)
			return
		}
		e.m.complete(e.now, j.acct, int(j.task))
		if e.strategy == StrategyLRS {
			e.lrsSynced(j.acct)
		}
		e.finish(i)
	}
}

// retryAt puts a snoozed or failed job back for its next attempt at its
// due: available at once when that is within River's scheduler interval
// (River's executor does so, rather than wait for the scheduler), else
// retryable until the scheduler promotes it.
func (e *engine) retryAt(i int32) {
	if e.jobs[i].due-e.now <= int64(schedulerInterval) {
		e.move(i, stAvailable)
		return
	}
	e.move(i, stRetryable)
}

func (e *engine) finish(i int32) {
	e.jobs[i].state = stDone
	delete(e.fanOut, i)
	e.free = append(e.free, i)
}

// retryDelay is River's default retry policy: attempt^4 seconds, +/- 10%.
func retryDelay(rng *rand.Rand, attempt int) int64 {
	s := math.Pow(float64(attempt), 4)
	s += s * 0.1 * (2*rng.Float64() - 1)
	return int64(s * float64(time.Second))
}

// perSlotRetryDelay is the per-slot worker's NextRetry: 1 s doubling, at
// most 30 s.
func perSlotRetryDelay(attempt int) int64 {
	return int64(min(time.Second<<min(max(attempt-1, 0), 5), 30*time.Second))
}

func (e *engine) outageStart() {
	e.down = true
	for i := range e.jobs {
		j := &e.jobs[i]
		if j.state != stRunning {
			continue
		}
		j.epoch++
		j.state = stStuck
		e.active--
		e.m.busy(e.now, -1)
		// The rescuer (every 30 s from the restart) picks it up once it has
		// been running RescueStuckJobsAfter.
		restart := int64(e.cfg.Outage.Start + e.cfg.Outage.Length)
		due := max(restart, j.started+int64(e.cfg.RescueStuckJobsAfter))
		ticks := (due - restart + int64(rescuerInterval) - 1) / int64(rescuerInterval)
		e.schedule(restart+ticks*int64(rescuerInterval), evRescue, int32(i), j.epoch)
	}
	e.fetchWhenFree = false
}

// rescue retries (or discards) a job orphaned by the outage; a fan-out
// resumes after its last committed batch.
func (e *engine) rescue(i int32) {
	j := &e.jobs[i]
	if j.state != stStuck {
		return
	}
	maxAttempts := int(e.specs[0].SyncOpts.MaxAttempts)
	switch j.kind {
	case kindSync:
		if int(j.attempt) >= maxAttempts {
			e.m.discarded++
			e.m.move(e.now, stRunning, stDone)
			e.finish(i)
			return
		}
		j.due = e.now + retryDelay(e.rng, int(j.attempt))
		j.state = stRunning // for the metrics: running -> retryable
	case kindPerSlot:
		j.due = e.now + perSlotRetryDelay(int(j.attempt))
	default:
		j.due = e.now
	}
	e.move(i, stRetryable)
}

// churn replaces Churn x accounts at a cycle start: removed accounts leave
// their slot, new ones (new UUIDs) join theirs.
func (e *engine) churn() {
	n := int(math.Round(e.cfg.Churn * float64(len(e.accounts))))
	for range n {
		i := int32(e.rng.IntN(len(e.accounts)))
		if e.slotOf != nil {
			e.removeFromSlot(i)
		}
		e.accounts[i] = newAccount(e.rng)
		for e.own != nil && !e.own.has(&e.accounts[i]) {
			e.accounts[i] = newAccount(e.rng) // a new account of this shard's buckets
		}
		if e.slotOf != nil {
			e.addToSlot(i)
		}
		if e.strategy == StrategyLRS {
			e.lrsVer[i]++
			e.lastSynced[i] = math.MinInt64
			e.enqueuedAt[i] = math.MinInt64
			e.lrs.push(lrsEntry{lastSynced: math.MinInt64, idKey: e.accounts[i].idKey(), acct: i, ver: e.lrsVer[i]})
		}
		for ti := range e.specs {
			e.m.lastDone[ti*len(e.accounts)+int(i)] = math.MinInt64
		}
	}
}

func newAccount(rng *rand.Rand) account {
	var a account
	binary.BigEndian.PutUint64(a.id[:8], rng.Uint64())
	binary.BigEndian.PutUint64(a.id[8:], rng.Uint64())
	a.id[6] = a.id[6]&0x0f | 0x40 // version 4
	a.id[8] = a.id[8]&0x3f | 0x80 // RFC 4122 variant
	return a
}

// keysetLess is the per-slot query's order: bucket, then id.
func (e *engine) keysetLess(a, b int32) int {
	x, y := &e.accounts[a], &e.accounts[b]
	if bx, by := e.specs[0].Plan.BucketOf(x.id), e.specs[0].Plan.BucketOf(y.id); bx != by {
		return bx - by
	}
	for k := range 16 {
		if x.id[k] != y.id[k] {
			return int(x.id[k]) - int(y.id[k])
		}
	}
	return 0
}

func (e *engine) removeFromSlot(i int32) {
	s := e.specs[0].Plan.SlotOf(e.accounts[i].id)
	list := e.slotOf[s]
	k, found := slices.BinarySearchFunc(list, i, e.keysetLess)
	if found {
		e.slotOf[s] = slices.Delete(list, k, k+1)
	}
}

func (e *engine) addToSlot(i int32) {
	s := e.specs[0].Plan.SlotOf(e.accounts[i].id)
	k, _ := slices.BinarySearchFunc(e.slotOf[s], i, e.keysetLess)
	e.slotOf[s] = slices.Insert(e.slotOf[s], k, i)
}

// lrsPoll is the poller's query: up to K accounts not synced in the last
// cycle and not enqueued in the last quarter cycle, least recently synced
// first, marked enqueued, their sync jobs inserted to run now.
func (e *engine) lrsPoll() {
	cycle := int64(e.cfg.Cycle)
	// Accounts taken a quarter cycle ago are eligible again unless synced.
	keep := e.lrsRetry[:0]
	for _, r := range e.lrsRetry {
		switch {
		case r.ver != e.lrsVer[r.acct]:
		case e.enqueuedAt[r.acct] < e.now-cycle/4:
			e.lrs.push(r)
		default:
			keep = append(keep, r)
		}
	}
	e.lrsRetry = keep
	var taken []int32
	for len(taken) < e.lrsK && len(e.lrs) > 0 && e.lrs[0].lastSynced < e.now-cycle {
		r := e.lrs.pop()
		if r.ver != e.lrsVer[r.acct] {
			continue
		}
		e.enqueuedAt[r.acct] = e.now
		e.lrsRetry = append(e.lrsRetry, r)
		taken = append(taken, r.acct)
	}
	for _, a := range taken {
		e.insert(job{kind: kindSync, acct: a, prio: 1, due: e.now})
	}
}

func (e *engine) lrsSynced(a int32) {
	e.lrsVer[a]++
	e.lastSynced[a] = e.now
	e.lrs.push(lrsEntry{lastSynced: e.now, idKey: e.accounts[a].idKey(), acct: a, ver: e.lrsVer[a]})
}
