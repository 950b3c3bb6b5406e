package sim

import (
	"math"
	"math/bits"
	"time"
)

// hist is a log-linear histogram of non-negative microsecond values: exact
// below 256 µs, then 128 buckets per power of two (at most 0.8% error).
type hist struct {
	counts   [256 + 57*128]uint64
	n        uint64
	min, max int64
}

func histIndex(us int64) int {
	if us < 256 {
		return int(max(us, 0))
	}
	e := bits.Len64(uint64(us)) - 8
	return 256 + (e-1)*128 + int(uint64(us)>>e) - 128
}

// histValue is the middle of bucket i, in µs.
func histValue(i int) float64 {
	if i < 256 {
		return float64(i)
	}
	e := (i-256)/128 + 1
	lo := uint64((i-256)%128+128) << e
	return float64(lo) + float64(uint64(1)<<e)/2
}

func (h *hist) add(d int64) {
	us := d / int64(time.Microsecond)
	h.counts[histIndex(us)]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	h.n++
	h.max = max(h.max, d)
}

// quantile returns the q-quantile in seconds (0 when empty), within the
// observed minimum and maximum.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	var cum uint64
	v := float64(h.max) / 1e3
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			v = histValue(i)
			break
		}
	}
	return min(max(v*1e3, float64(h.min)), float64(h.max)) / 1e9
}

func (h *hist) reset() { *h = hist{} }

// merge adds o's values to h.
func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Row is one metrics interval of one strategy. Depths are sync jobs by
// state at the row's time; the rest covers the interval ending then.
type Row struct {
	T                              float64 // seconds from the first cycle start
	Scheduled, Available, Running  int64
	Retryable, Pending             int64 // pending: scheduled + available + retryable
	Starts, Completions            int64
	StartsPerSecond                float64
	LatenessP50, LatenessP99       float64 // of the interval's starts, seconds
	BusyWorkers                    float64 // mean over the interval, all job kinds
	GapMean, GapMax                float64 // between an account's successive completed syncs, seconds
	Failed                         int64
	intervalGapSum, intervalGapCnt float64
}

type metrics struct {
	states [stDone + 1]int64 // sync jobs by state

	peak        int64
	pendingArea float64 // integral of pending over time, job-ns
	lastChange  int64
	busyNow     int64
	busyArea    float64 // inside [0, simEnd]
	rowBusy     float64 // since the last row
	busyLast    int64

	lateness hist
	gaps     hist
	lastDone []int64 // per task and account
	accounts int

	sec, secStarts, maxStarts int64
	starts, completed         int64
	failed, discarded         int64
	skipped                   int64

	interval    int64
	rows        []Row
	cur         Row
	curLate     hist
	first, last int64 // first and last sync start

	simEnd int64 // the simulated duration: means cover [0, simEnd]

	// perSecond: count sync starts in each second (a shard of RunShards,
	// for the fleet's busiest second); perSecOver: a start fell outside
	// the series' bound.
	perSecond  bool
	perSec     []uint32
	perSecOver bool
}

// perSecondMax bounds the per-second series: 10,000,000 seconds (116
// days, 40 MB).
const perSecondMax = 10_000_000

func newMetrics(accounts, tasks int, interval, simulated time.Duration) *metrics {
	m := &metrics{lastDone: make([]int64, accounts*tasks), accounts: accounts, interval: int64(interval), simEnd: int64(simulated), sec: math.MinInt64, first: -1}
	for i := range m.lastDone {
		m.lastDone[i] = math.MinInt64
	}
	return m
}

func (m *metrics) pending() int64 {
	return m.states[stScheduled] + m.states[stAvailable] + m.states[stRetryable]
}

// clipped is the part of [from, to] inside the simulated time [0, simEnd].
func (m *metrics) clipped(from, to int64) float64 {
	lo, hi := max(from, 0), min(to, m.simEnd)
	return float64(max(hi-lo, 0))
}

func (m *metrics) account(t int64) {
	m.pendingArea += float64(m.pending()) * m.clipped(m.lastChange, t)
	m.lastChange = t
}

// add counts a new sync job in state st.
func (m *metrics) add(t int64, st jobState) {
	m.account(t)
	m.states[st]++
	m.peak = max(m.peak, m.pending())
}

// move counts a sync job going from one state to another.
func (m *metrics) move(t int64, from, to jobState) {
	m.account(t)
	m.states[from]--
	m.states[to]++
	m.peak = max(m.peak, m.pending())
}

func (m *metrics) busy(t int64, delta int64) {
	m.rowBusy += float64(m.busyNow) * float64(t-m.busyLast)
	m.busyArea += float64(m.busyNow) * m.clipped(m.busyLast, t)
	m.busyLast = t
	m.busyNow += delta
}

// start records a sync start at t of a job due at due.
func (m *metrics) start(t, due int64) {
	late := max(t-due, 0)
	m.lateness.add(late)
	m.curLate.add(late)
	m.starts++
	m.cur.Starts++
	if m.first < 0 {
		m.first = t
	}
	m.last = t
	sec := t / int64(time.Second)
	if t < 0 {
		sec--
	}
	if sec != m.sec {
		m.maxStarts = max(m.maxStarts, m.secStarts)
		m.sec, m.secStarts = sec, 0
	}
	m.secStarts++
	if m.perSecond {
		switch {
		case sec < 0 || sec >= perSecondMax:
			m.perSecOver = true
		default:
			for int64(len(m.perSec)) <= sec {
				m.perSec = append(m.perSec, 0)
			}
			m.perSec[sec]++
		}
	}
}

// complete records a successful sync of account a by the task with index
// task: gaps are per account and task.
func (m *metrics) complete(t int64, a int32, task int) {
	a += int32(task * m.accounts)
	m.move(t, stRunning, stDone)
	m.completed++
	m.cur.Completions++
	if prev := m.lastDone[a]; prev != math.MinInt64 {
		gap := t - prev
		m.gaps.add(gap)
		g := float64(gap) / 1e9
		m.cur.GapMax = max(m.cur.GapMax, g)
		m.cur.intervalGapSum += g
		m.cur.intervalGapCnt++
	}
	m.lastDone[a] = t
}

// sample closes the row ending at t.
func (m *metrics) sample(t int64) {
	m.busy(t, 0)
	r := m.cur
	r.T = float64(t) / 1e9
	r.Scheduled, r.Available = m.states[stScheduled], m.states[stAvailable]
	r.Running, r.Retryable = m.states[stRunning], m.states[stRetryable]
	r.Pending = m.pending()
	r.Failed = m.failed
	secs := float64(m.interval) / 1e9
	if len(m.rows) == 0 {
		secs = 0 // the first row is the state at t = 0
	}
	if secs > 0 {
		r.StartsPerSecond = float64(r.Starts) / secs
		r.BusyWorkers = m.rowBusy / float64(m.interval)
	}
	r.LatenessP50, r.LatenessP99 = m.curLate.quantile(0.50), m.curLate.quantile(0.99)
	if r.intervalGapCnt > 0 {
		r.GapMean = r.intervalGapSum / r.intervalGapCnt
	}
	m.rows = append(m.rows, r)
	m.cur = Row{}
	m.curLate.reset()
	m.rowBusy = 0
}

func (m *metrics) finish(t int64) {
	m.maxStarts = max(m.maxStarts, m.secStarts)
	m.busy(t, 0)
}
