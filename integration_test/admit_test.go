package integration

import (
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// expectedSeconds is how long the package's tests of 10 s or more take
// (make test on a 2-core machine, from each test's "admitted" line to its
// end, ci4 of 2026-12-02, rounded): parallel starts them first, so that the
// package ends when its longest test does rather than when a long test
// that happened to start last does. A test not listed starts after them.
var expectedSeconds = map[string]int{
	"TestDeploysProcesses":                            157,
	"TestShardsThreeDatabases":                        140,
	"TestOppositeOfLateFanOutsProcesses":              137,
	"TestShardsOperator":                              135,
	"TestThreeNodes":                                  117,
	"TestServeRestart":                                117,
	"TestServeProcesses":                              117,
	"TestOutageLongerThanACycle":                      110,
	"TestAccountChurn":                                110,
	"TestStaleQueuedSyncsSkippedAfterOutage":          109,
	"TestPlanChangeShortRetention":                    109,
	"TestTwoFullCycles":                               108,
	"TestUnweightedCycleFinishedByWeightedWorker":     94,
	"TestDemoWeightedCycleFinishedByUnweightedWorker": 92,
	"TestLeastPrivilege":                              91,
	"TestKillMidFanOutAccountsDatabase":               91,
	"TestRestartAcrossSlots":                          89,
	"TestKillMidFanOut":                               89,
	"TestExactlyOnceWithShortRetention":               85,
	"TestKillMidFanOutWeighted":                       72,
	"TestUpstreamLimitsAndBreaker":                    70,
	"TestSeveralTasksOneClient":                       66,
	"TestLateSlotsOfAnotherGridsCycleAreSpread":       65,
	"TestUpstreamLimitsProcesses":                     61,
	"TestUpgradeProcesses":                            58,
	"TestDatabaseRestart":                             55,
	"TestReciprocalTasks":                             53,
	"TestTwoByteBucketsFullCycle":                     52,
	"TestWeightedBootstrapTinyTimeoutStillBootstraps": 18,
	"TestMetrics":                                     18,
	"TestPlanChangesShortRetention":                   15,
	"TestPlanChangeWeighted":                          15,
	"TestMonthlyAcrossDST":                            14,
	"TestOppositeOfLateFanOuts":                       12,
	"TestWeightedCycle":                               10,
}

// admissionWindow is how long the gate collects the tests Go resumes at
// once (after the package's sequential part) before it starts any: Go
// resumes paused parallel tests in no particular order.
const admissionWindow = 300 * time.Millisecond

// gate admits at most size top-level tests at a time, longest first.
type gate struct {
	mu      sync.Mutex
	cond    *sync.Cond
	free    int
	open    bool           // the admission window has passed
	waiting map[string]int // waiting tests by name: expected seconds
}

var (
	gateOnce sync.Once
	theGate  *gate
)

// parallel is t.Parallel for a top-level test of this package, then waits
// for its turn: at most RIVERSLOT_TEST_PARALLEL (make test sets it from
// INTEGRATION_PARALLEL; default 10) run at once, the longest
// (expectedSeconds) first. make test runs go test with a -parallel above
// the number of tests, so that Go's own limit, which starts them in no
// order, does not decide.
func parallel(t *testing.T) {
	t.Parallel()
	gateOnce.Do(func() {
		size := 10
		if n, err := strconv.Atoi(os.Getenv("RIVERSLOT_TEST_PARALLEL")); err == nil && n > 0 {
			size = n
		}
		theGate = &gate{free: size, waiting: map[string]int{}}
		theGate.cond = sync.NewCond(&theGate.mu)
		time.AfterFunc(admissionWindow, func() {
			theGate.mu.Lock()
			theGate.open = true
			theGate.cond.Broadcast()
			theGate.mu.Unlock()
		})
	})
	g := theGate
	name := t.Name()
	asked := time.Now()
	g.mu.Lock()
	g.waiting[name] = expectedSeconds[name]
	for !g.open || g.free == 0 || !g.first(name) {
		g.cond.Wait()
	}
	g.free--
	delete(g.waiting, name)
	g.cond.Broadcast()
	g.mu.Unlock()
	// The gate's wait is part of the test's time in go test's report: this
	// line (in the -json stream) tells the test's own time from it.
	t.Logf("admitted after waiting %s", time.Since(asked).Round(time.Millisecond))
	t.Cleanup(func() {
		g.mu.Lock()
		g.free++
		g.cond.Broadcast()
		g.mu.Unlock()
	})
}

// first reports whether name is the waiting test to start next: the
// longest expected, ties by name.
func (g *gate) first(name string) bool {
	mine := g.waiting[name]
	for other, secs := range g.waiting {
		if secs > mine || secs == mine && other < name {
			return false
		}
	}
	return true
}
