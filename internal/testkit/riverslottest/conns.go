package riverslottest

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Connections a test binary opens besides the ones ReserveConnections
// hands out: Pool's and AccountsPool's, and a margin for pools tests open
// for a moment (a second role's, an in-process command's status query).
const (
	poolConns     = 30
	accountsConns = 10
	marginConns   = 8
)

// connBudget hands out the connections of the test server that worker
// processes and in-process commands may open, first come first served.
type connBudget struct {
	mu      sync.Mutex
	cond    *sync.Cond
	size    int
	free    int
	next    uint64 // the ticket the next caller takes
	serving uint64 // the ticket whose turn it is
}

var (
	budgetOnce sync.Once
	budget     *connBudget
)

// ConnectionBudget returns how many connections ReserveConnections hands
// out in this test binary: the server's max_connections, less the
// superuser's reserved ones, the connections already open when the binary
// first asked, this binary's own pools and a margin, divided among the test
// binaries that run at once (RIVERSLOT_TEST_BINARIES, set by `make test` to
// its -p; default 1). It is at least 16, so any one test can run.
func ConnectionBudget(tb testing.TB) int {
	tb.Helper()
	pool := Pool(tb)
	budgetOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var maxConns, reserved, open int
		err := pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
			current_setting('superuser_reserved_connections')::int,
			(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')`).Scan(&maxConns, &reserved, &open)
		if err != nil {
			tb.Fatalf("error reading the test server's max_connections: %v", err)
		}
		binaries := 1
		if n, err := strconv.Atoi(os.Getenv("RIVERSLOT_TEST_BINARIES")); err == nil && n > 1 {
			binaries = n
		}
		size := (maxConns-reserved-open)/binaries - poolConns - accountsConns - marginConns
		budget = &connBudget{size: max(size, 16), free: max(size, 16)}
		budget.cond = sync.NewCond(&budget.mu)
	})
	return budget.size
}

// ReserveConnections waits until n of the test server's connections are
// free in this binary's budget (see ConnectionBudget), takes them for the
// rest of the test and returns them when it ends. Tests that start worker
// processes or run riverslot's commands in-process (each opens its own
// pool) reserve what those pools may open, so that parallel tests fit in
// the server's max_connections instead of failing with "too many clients".
// Waiters are served in order. n above the budget is cut to it: such a
// test runs alone. The returned func gives them back before the test ends
// (calling it again does nothing).
func ReserveConnections(tb testing.TB, n int) (release func()) {
	tb.Helper()
	ConnectionBudget(tb)
	n = min(n, budget.size)
	b := budget
	b.mu.Lock()
	ticket := b.next
	b.next++
	for b.serving != ticket || b.free < n {
		b.cond.Wait()
	}
	b.free -= n
	b.serving++
	b.cond.Broadcast()
	b.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			b.mu.Lock()
			b.free += n
			b.cond.Broadcast()
			b.mu.Unlock()
		})
	}
	tb.Cleanup(release)
	return release
}
