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
# So the suite runs as two streams at once, each a fixed order, once the
# non-race test binaries are built (the -race ones build beside them):
#
#   stream 1: integration_test (no -race; at most INTEGRATION_PARALLEL of its
#             top-level tests at once, the longest first), then the
#             computation packages (sim, bench, slotplan: CPU-bound, they
#             start when the real cycles of integration_test are over);
#   stream 2: cmd/riverslot and its internal packages (no -race: the CLI's
#             demos are real River clients on short cycles), then, once the
#             -race build is done, every other package with -race, two at
#             a time, the longest first;
#
# Without -race: integration_test, whose real clients under the race
# detector made River's scheduler time out (a 30 s JobScheduler timeout,
# run queue 16-30 on 2 cores), and cmd/riverslot/...: the CLI's concurrency
# is the library's, which the race packages run under -race (the library,
# serve, riverslotweb, internal/...). Not compiling cmd/riverslot's
# packages with -race also spares a cold build the race variants of
# modernc.org/sqlite and gonum/plot.
#
# -vet=off: go vet ./... (make lint, beside the tests in CI) runs every
# analyzer go test would run before each package's tests; run twice, they
# were CPU the saturated cold run (2 cores, idle 0-3%) did not have.
#
# Each go test writes its -json stream to .test-out/NAME.json through a live
# report (package results as they finish); .test-output.json is all of them,
# and the final report prints every failed test's output and the slowest.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export GOFLAGS=${GOFLAGS:-}

t0=$(date +%s)
# say: a progress line with the seconds since make test began.
say() { echo "test.sh [+$(($(date +%s) - t0))s] $*"; }

url=$(PG_OWN=1 scripts/pg.sh "${TEST_DB:-riverslot_test}") || exit 1
echo "test database: $url"

rm -rf .test-out && mkdir -p .test-out .bin || exit 1
$GO build -o .testreport ./scripts/testreport || exit 1

# Package sets. race: everything not in the others, the longest first.
integration=./integration_test
cli=$($GO list ./cmd/riverslot/... | grep -v -e '/internal/sim$' -e '/internal/bench$') || exit 1
compute="./cmd/riverslot/internal/sim ./cmd/riverslot/internal/bench ./slotplan"
long_race="./serve ./internal/bootstrap . ./examples/quickstart ./riverslotweb"
race="$long_race $($GO list ./... | grep -v -e '/integration_test$' -e '/cmd/riverslot' -e '/slotplan$' \
	-e '^github.com/riverslot/riverslot$' -e '/serve$' -e '/internal/bootstrap$' -e '/examples/quickstart$' -e '/riverslotweb$')" || exit 1

# The riverslot binary (RIVERSLOT_BIN: tests start it as a process) and the
# non-race test binaries are built before any test starts: a compile at
# full priority beside a real cycle made it late. The -race test binaries
# are built beside the first tests, at nice 19 (the CPU the real cycles
# leave: integration_test and cmd/riverslot mostly wait on them), in a
# process group of their own; stream 2 raises the build to normal
# priority once cmd/riverslot's tests are done and waits for it. Go caches
# linked test binaries, so go test links none of them again. Built before
# the tests (n3, 2026-11-28), the two builds took 230 s of a cold run.
say "building the riverslot binary and the non-race test binaries"
$GO build -o .bin/riverslot ./cmd/riverslot || exit 1
$GO test -vet=off -count=1 -run '^$' $integration $cli $compute >.test-out/build.log 2>&1 || {
	grep -v '^ok' .test-out/build.log >&2
	exit 1
}
say "built; the -race test binaries build at nice 19 beside the tests"
# shellcheck disable=SC2086 # $race: one word a package
setsid bash -c 'nice -n 19 "$0" test -vet=off -race -count=1 -run "^$" "$@" >.test-out/race-build.log 2>&1; echo $? >.test-out/race-build.rc' "$GO" $race &
race_build=$!
trap 'kill -- -$race_build 2>/dev/null || true' EXIT

# race_built: raises the -race build to normal priority (renice needs
# root; otherwise it stays niced) and waits for it; fails when it failed.
race_built() {
	if kill -0 "$race_build" 2>/dev/null && ! renice -n 0 -g "$race_build" >/dev/null 2>&1; then
		say "renice failed (not root?): the -race build stays at nice 19"
	fi
	say "waiting for the -race test binaries"
	while [ ! -s .test-out/race-build.rc ]; do
		# A build that died without its status (killed, or no setsid)
		# would be waited for forever.
		if ! kill -0 "$race_build" 2>/dev/null && [ ! -s .test-out/race-build.rc ]; then
			echo "the -race build ended without a status (see .test-out/race-build.log)" >&2
			return 1
		fi
		sleep 1
	done
	if [ "$(cat .test-out/race-build.rc)" != 0 ]; then
		grep -v '^ok' .test-out/race-build.log >&2
		echo "building the -race test binaries failed (above)" >&2
		return 1
	fi
	say "the -race test binaries are built"
}

# The test binaries of each stream share the server's connections
# (riverslottest.ConnectionBudget divides max_connections by
# RIVERSLOT_TEST_BINARIES): integration_test half, the other binaries
# running at the same time a quarter or an eighth.
common=(env TEST_DATABASE_URL="$url" RIVERSLOT_BIN="$PWD/.bin/riverslot" RIVERSLOT_TEST_PARALLEL="${INTEGRATION_PARALLEL:-10}")
gotest=($GO test -json -vet=off -count=1 -parallel 16 -timeout 20m)

# run NAME BINARIES GO-TEST-ARGS...: one go test, its stream to
# .test-out/NAME.json through the live report; returns go test's status.
run() {
	local name=$1 binaries=$2
	shift 2
	say "start $name: go test $*"
	"${common[@]}" RIVERSLOT_TEST_BINARIES="$binaries" "${gotest[@]}" "$@" 2>&1 |
		tee ".test-out/$name.json" | ./.testreport -failures=false -summary=false
	local rc=${PIPESTATUS[0]}
	say "end $name ($rc)"
	return "$rc"
}

stream1() {
	local rc=0
	run integration "$1" -parallel 64 $integration || rc=1
	run compute "$2" -p "$3" $compute || rc=1
	return $rc
}
stream2() {
	local rc=0
	run cli "$1" -p 1 $cli || rc=1
	race_built || return 1
	run race "$2" -race -p "$3" $race || rc=1
	return $rc
}

# The streams side by side need about 1,600 connections (four test
# binaries at once; scripts/pg.sh's own cluster has them). A smaller
# server (TEST_DATABASE_URL) gets them one after the other, and one
# package at a time below 250.
conns=$($GO run ./scripts/pgensure maxconns "$url") || exit 1
rc=0
if [ "$conns" -ge 1600 ]; then
	stream1 2 4 2 &
	s1=$!
	stream2 4 8 2 &
	s2=$!
	wait $s1 || rc=1
	wait $s2 || rc=1
else
	p=1
	[ "$conns" -ge 250 ] && p=2
	echo "max_connections is $conns (under 1600): the two streams one after the other, $p package(s) at a time"
	stream1 1 "$p" "$p" || rc=1
	stream2 1 "$p" "$p" || rc=1
fi
cat .test-out/*.json >.test-output.json
echo
./.testreport -packages=false -slowest 15 <.test-output.json || rc=1
exit $rc
