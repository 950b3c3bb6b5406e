package taskspec

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err says the database could not be reached
// or went away (connection refused or lost, a server shutting down or
// starting up, a connect timeout), as opposed to an error of the query
// itself. The tiers wait through such an error instead of using up a
// job's attempts: the database comes back, and a sync or a slot must not
// be lost to an outage of the accounts database.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var (
		connErr *pgconn.ConnectError
		netErr  net.Error
		pgErr   *pgconn.PgError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// The job's own timeout (a slow query) or its cancellation: an
		// error of its own, not an outage. Checked first: a deadline is
		// a net.Error too.
		return false
	case errors.As(err, &connErr):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01-57P03: admin shutdown,
		// crash shutdown, cannot connect now.
		return len(pgErr.Code) == 5 && (pgErr.Code[:2] == "08" || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03")
	case errors.As(err, &netErr):
		return !netErr.Timeout()
	}
	return pgconn.SafeToRetry(err)
}

// UnreachableWait is the first wait (snooze, without using an attempt) of
// a job that found the accounts database unreachable; UnreachableWaitFor
// doubles it with every snooze, up to UnreachableWaitMax.
const (
	UnreachableWait    = 5 * time.Second
	UnreachableWaitMax = 2 * time.Minute
)

// UnreachableWaitFor returns the wait after snoozes earlier waits of a
// job: UnreachableWait doubled per snooze up to UnreachableWaitMax, with
// ±25% jitter so that the jobs of an outage do not come back together.
func UnreachableWaitFor(snoozes int) time.Duration {
	d := min(UnreachableWait<<min(max(snoozes, 0), 5), UnreachableWaitMax)
	return d*3/4 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Waits counts, per job, the waits a worker gave a job that found a
// database unreachable, so that each is longer than the last
// (UnreachableWaitFor). It is the worker's own count, not River's job
// metadata: a job another node picks up starts again at UnreachableWait.
// It forgets every job past 10,000, so it stays bounded. The zero value
// is ready to use.
type Waits struct {
	mu sync.Mutex
	n  map[int64]int
}

// Next returns the job's next wait and counts it.
func (w *Waits) Next(jobID int64) time.Duration {
	return UnreachableWaitFor(w.Add(jobID) - 1)
}

// Add counts one more wait of the job and returns how many it had.
func (w *Waits) Add(jobID int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil || len(w.n) >= 10_000 {
		w.n = make(map[int64]int)
	}
	w.n[jobID]++
	return w.n[jobID]
}
