package sim

// event is one thing that happens at t. seq orders events at the same t by
// the order they were scheduled, so a run is deterministic.
type event struct {
	t    int64
	seq  uint64
	kind evKind
	a    int32  // job index, task index or generation
	b    uint32 // job epoch
}

type evKind uint8

const (
	evTick         evKind = iota // River's scheduler promotes due jobs
	evPoll                       // producer poll timer
	evFetch                      // a debounced fetch fires
	evFetchTrigger               // an insert notification reaches the producer
	evDone                       // a job's work ends
	evBatch                      // a fan-out commits its next batch
	evTrigger                    // a strategy's periodic trigger
	evCycle                      // a cycle starts (churn)
	evRescue                     // the rescuer picks up a job orphaned by an outage
	evOutageStart
	evOutageEnd
	evSample  // one metrics row
	evUpRetry // a sync waiting in process for a lease asks its upstream again
	evUpCall  // a sync that waited in process for its start calls its upstream
)

func (a event) before(b event) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.seq < b.seq
}

// jobKey orders jobs the way River's fetch does inside one priority:
// scheduled_at, then id (insertion order).
type jobKey struct {
	due int64
	seq uint64
	job int32
}

func (a jobKey) before(b jobKey) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return a.seq < b.seq
}

// lrsEntry is one account in the least-recently-synced order: last synced,
// then id.
type lrsEntry struct {
	lastSynced int64
	idKey      uint64
	acct       int32
	ver        uint32
}

func (a lrsEntry) before(b lrsEntry) bool {
	if a.lastSynced != b.lastSynced {
		return a.lastSynced < b.lastSynced
	}
	return a.idKey < b.idKey
}

// ordered values order themselves.
type ordered[T any] interface{ before(T) bool }

var (
	_ ordered[event]    = event{}
	_ ordered[jobKey]   = jobKey{}
	_ ordered[lrsEntry] = lrsEntry{}
)

// minHeap is a binary min-heap of values that order themselves.
type minHeap[T ordered[T]] []T

func (h *minHeap[T]) push(x T) {
	*h = append(*h, x)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].before(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *minHeap[T]) pop() T {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s[r].before(s[l]) {
			m = r
		}
		if !s[m].before(s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
