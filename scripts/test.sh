#!/usr/bin/env bash
# make test: gets a PostgreSQL (scripts/pg.sh), creates the test database and
# runs every package's tests against it, in streams side by side, with one
# report at the end. `make test` is the command; its variables are read from
# the environment: GO, TEST_DB, INTEGRATION_PARALLEL, TEST_DATABASE_URL.
#
# Why streams: most of the suite waits on real cycles (River clients and
# worker processes on 16-160 s cycles). Run one package set after the other,
# the tests took 10.7 min on 2 cores with the CPUs 42% busy on average
# (2026-11-28, fresh clone; a 10 s sampler of /proc/stat): the
# integration tests' tail and the demos of cmd/riverslot used 2-30% of them.
# So the suite runs as two streams at once, each a fixed order, and the
# compile work that is not needed yet runs at nice 19 in the CPU time the
# tests leave:
#
#   stream 1: integration_test (no -race; at most INTEGRATION_PARALLEL of its
#             top-level tests at once, the longest first), then the
#             computation packages (sim, bench, slotplan: CPU-bound, they
#             start when the real cycles of integration_test are over);
#   stream 2: cmd/riverslot and its internal packages (no -race: the CLI's
#             demos are real River clients on short cycles), then every
#             other package with -race, two at a time, the longest first;
#   nice 10:  the -race build of stream 2's second half, beside the tests'
#             first minutes (at nice 19 beside the lint it was done only when
#             integration_test ended, and stream 2 waited for it).
#
# Without -race: integration_test, whose real clients under the race
# detector made River's scheduler time out (a 30 s JobScheduler timeout,
# run queue 16-30 on 2 cores), and cmd/riverslot/...: the CLI's concurrency
# is the library's, which the race packages run under -race (the library,
# serve, riverslotweb, internal/...). Not compiling cmd/riverslot's
# packages with -race also spares a cold build the race variants of
# modernc.org/sqlite and gonum/plot.
#
# Each go test writes its -json stream to .test-out/NAME.json through a live
# report (package results as they finish); .test-output.json is all of them,
# and the final report prints every failed test's output and the slowest.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export GOFLAGS=${GOFLAGS:-}

url=$(PG_OWN=1 scripts/pg.sh "${TEST_DB:-riverslot_test}") || exit 1
echo "test database: $url"

rm -rf .test-out && mkdir -p .test-out .bin || exit 1
$GO build -o .testreport ./scripts/testreport || exit 1

# Package sets. RACE: everything not in the others, the longest first.
integration=./integration_test
cli=$($GO list ./cmd/riverslot/... | grep -v -e '/internal/sim$' -e '/internal/bench$') || exit 1
compute="./cmd/riverslot/internal/sim ./cmd/riverslot/internal/bench ./slotplan"
long_race="./serve ./internal/bootstrap . ./examples/quickstart ./riverslotweb"
race="$long_race $($GO list ./... | grep -v -e '/integration_test$' -e '/cmd/riverslot' -e '/slotplan$' \
	-e '^github.com/riverslot/riverslot$' -e '/serve$' -e '/internal/bootstrap$' -e '/examples/quickstart$' -e '/riverslotweb$')" || exit 1

# What stream 1 and stream 2's first half need, before any test starts: a
# compile beside a real cycle made it late. The worker processes' binary
# too (RIVERSLOT_BIN): tests start it as a process.
echo "building the riverslot binary and the test binaries (no -race)"
$GO build -o .bin/riverslot ./cmd/riverslot || exit 1
$GO test -count=1 -run '^$' $integration $cli $compute >/dev/null || {
	$GO test -count=1 -run '^$' $integration $cli $compute 2>&1 | grep -v '^ok' >&2
	exit 1
}

# The test binaries of each stream share the server's connections
# (riverslottest.ConnectionBudget divides max_connections by
# RIVERSLOT_TEST_BINARIES): integration_test half, the other binaries
# running at the same time a quarter or an eighth.
common=(env TEST_DATABASE_URL="$url" RIVERSLOT_BIN="$PWD/.bin/riverslot" RIVERSLOT_TEST_PARALLEL="${INTEGRATION_PARALLEL:-10}")
gotest=($GO test -json -count=1 -parallel 16 -timeout 20m)

# run NAME BINARIES GO-TEST-ARGS...: one go test, its stream to
# .test-out/NAME.json through the live report; returns go test's status.
run() {
	local name=$1 binaries=$2
	shift 2
	echo "start $name: go test $*"
	"${common[@]}" RIVERSLOT_TEST_BINARIES="$binaries" "${gotest[@]}" "$@" 2>&1 |
		tee ".test-out/$name.json" | ./.testreport -failures=false -summary=false
	local rc=${PIPESTATUS[0]}
	echo "end $name ($rc)"
	return "$rc"
}

# The -race build, at nice 10; its status goes to a file, which stream 2
# (another process) waits for.
(
	nice -n 10 $GO test -race -count=1 -run '^$' $race >.test-out/race-build.log 2>&1
	echo $? >.test-out/race-build.rc
) &

(
	rc=0
	run integration 2 -parallel 64 $integration || rc=1
	run compute 4 -p 2 $compute || rc=1
	exit $rc
) &
stream1=$!

(
	rc=0
	run cli 4 -p 1 $cli || rc=1
	while [ ! -f .test-out/race-build.rc ]; do sleep 1; done
	if [ "$(cat .test-out/race-build.rc)" != 0 ]; then
		cat .test-out/race-build.log >&2
		echo "building the -race test binaries failed (above)" >&2
		exit 1
	fi
	run race 8 -race -p 2 $race || rc=1
	exit $rc
) &
stream2=$!

rc=0
wait $stream1 || rc=1
wait $stream2 || rc=1
cat .test-out/*.json >.test-output.json
echo
./.testreport -packages=false -slowest 15 <.test-output.json || rc=1
exit $rc
