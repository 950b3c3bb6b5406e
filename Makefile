# riverslot. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO ?= go
PG := scripts/pg.sh

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-10s %s\n", $$1, $$2}'

.PHONY: test
# Four runs of go test, one after the other, one report:
#   1. integration_test alone, without -race: its real River clients and
#      worker processes on short real cycles load both CPUs (under the
#      race detector they made River's scheduler time out: a 30 s
#      JobScheduler timeout with no lock held, run queue 16-30 on 2
#      cores). With sim and bench beside it (2026-11-28, a new machine)
#      load averages of 20-35 failed real-cycle tests in four CI runs of
#      five (a call 1.2-4.2 s after its place, a late fan-out, peak
#      pending above its bound, a Sync made twice after a timeout);
#   2. every other package with -race, TEST_P at a time (2 when the server
#      allows 250 connections or more, as the cluster of make test's own
#      does; else 1), the longest (LONG_PKGS: real cycles, mostly waiting)
#      first. At 5 at a time (load average 35)
#      TestWeightedFallbackThenCensusJob failed (census steps out of time);
#      at 3, CPU pressure stayed at 94% and seven tests failed;
#   3. cmd/riverslot alone, without -race: its demos are real River
#      clients on 32-48 s cycles, 16 at once; under the race detector,
#      even beside one other package, their fan-outs ran late and syncs
#      went stale (CI run 5: 3, 4 and 312 account-cycles missed in three
#      demos). The CLI's concurrency is the library's, raced in phase 2;
#   4. the packages of computation and benchmarks (COMPUTE_PKGS: sim, bench,
#      slotplan) without -race, two at a time: their concurrency is the
#      library's, which phase 2 runs under -race (under it they took
#      59-165 s each). sim's TestFidelity compares a real cycle with the
#      simulation, bench places 300,000 accounts.
# This is slower than running them side by side (about 13 minutes warm
# instead of 10-11; the CI runs of this order are in DEVELOPERS.md).
# The worker processes' binary (cmd/riverslot without -race) is built
# before the tests too (RIVERSLOT_BIN): cold, its compile ran beside the
# first real cycles.
# The test binaries are built first, so no compile competes with a cycle.
# PG_OWN=1: scripts/pg.sh starts a throwaway cluster for the tests when the
# PostgreSQL server binaries are installed (TEST_DATABASE_URL overrides).
# -parallel 16: parallel tests within a package. integration_test runs
# with -parallel 64 and starts its top-level tests itself, at most
# INTEGRATION_PARALLEL at once (40 at once drove sync lateness p50 to 17 s
# on 2 cores and made syncs go stale; 16 at once, load average 25-35 on a
# new 2-core machine, failed five real-cycle bounds in one CI run and one
# in the next; 10 at once: load average 9-18, 298 s instead of 234-271 s,
# every test ok), the longest first
# (integration_test/admit_test.go); tests that start processes
# or commands share the server's connections (riverslottest.ReserveConnections).
# -count=1: the database is an input Go's test cache cannot see.
# scripts/testreport prints each package's result, the output of failed
# tests, and the slowest tests and packages at the end.
# .test-output.json keeps go test's raw -json stream (each test's start,
# pauses and end) for a look at where the time went.
TEST_DB ?= riverslot_test
TEST_P ?=
INTEGRATION_PARALLEL ?= 10
COMPUTE_PKGS = ./cmd/riverslot/internal/sim ./cmd/riverslot/internal/bench ./slotplan
NORACE_PKGS = ./integration_test ./cmd/riverslot $(COMPUTE_PKGS)
LONG_PKGS = ./serve ./internal/bootstrap ./riverslotweb
# RACE_PKGS: LONG_PKGS first, then every package not in either list.
RACE_PKGS = $(LONG_PKGS) $$($(GO) list ./... $(patsubst ./%,| grep -v -e '/%$$',$(NORACE_PKGS) $(LONG_PKGS)))
GOTEST = $(GO) test -json -count=1 -parallel 16 -timeout 20m
test: ## Get a Postgres (see scripts/pg.sh), create riverslot_test, run go test ./... (-race but for NORACE_PKGS), list the slowest tests
	@set -o pipefail; url=$$(PG_OWN=1 $(PG) $(TEST_DB)) && echo "test database: $$url" && \
		$(GO) build -o .testreport ./scripts/testreport && \
		echo "building the test binaries" && $(GO) test -race -count=1 -run '^$$' $(RACE_PKGS) >/dev/null && \
		$(GO) test -count=1 -run '^$$' $(NORACE_PKGS) >/dev/null && \
		$(GO) build -o .bin/riverslot ./cmd/riverslot && \
		p=$(TEST_P) && if [ -z "$$p" ]; then c=$$($(GO) run ./scripts/pgensure maxconns "$$url"); p=$$(( c >= 250 ? 2 : 1 )); fi; \
		echo "integration_test alone (no -race); the other packages $$p at a time (-race); cmd/riverslot alone (no -race); sim, bench and slotplan (no -race)" && \
		{ TEST_DATABASE_URL="$$url" RIVERSLOT_BIN=$(CURDIR)/.bin/riverslot RIVERSLOT_TEST_PARALLEL=$(INTEGRATION_PARALLEL) RIVERSLOT_TEST_BINARIES=1 $(GOTEST) -parallel 64 ./integration_test; r1=$$?; \
		  TEST_DATABASE_URL="$$url" RIVERSLOT_TEST_BINARIES=$$p $(GOTEST) -race -p $$p $(RACE_PKGS); r2=$$?; \
		  TEST_DATABASE_URL="$$url" RIVERSLOT_TEST_BINARIES=1 $(GOTEST) ./cmd/riverslot; r3=$$?; \
		  TEST_DATABASE_URL="$$url" RIVERSLOT_BIN=$(CURDIR)/.bin/riverslot RIVERSLOT_TEST_BINARIES=2 $(GOTEST) -p 2 $(COMPUTE_PKGS); r3=$$((r3 | $$?)); \
		  exit $$((r1 | r2 | r3)); } | tee .test-output.json | ./.testreport -slowest 15

.PHONY: demo
demo: ## Run one compressed live cycle of slot scheduling (riverslot demo)
	@url=$$($(PG) riverslot_demo) && echo "demo database: $$url" && \
		$(GO) run ./cmd/riverslot demo --database-url "$$url" $(DEMO_FLAGS)

.PHONY: serve
serve: ## Run riverslot serve (periodic HTTP calls, API at 127.0.0.1:8080; SERVE_FLAGS) on the local Postgres
	@url=$$($(PG) riverslot_demo) && echo "serve database: $$url" && \
		$(GO) run ./cmd/riverslot serve --database-url "$$url" $(SERVE_FLAGS)

.PHONY: bench-shards
bench-shards: ## The same fleet on one PostgreSQL server and on three throwaway ones (ACCOUNTS, CYCLE, CYCLES, WORKERS)
	bash scripts/bench-shards.sh

.PHONY: bench
bench: ## Run the benchmarks against a real Postgres (BENCH_FLAGS for sizes)
	@url=$$($(PG) riverslot_bench) && echo "bench database: $$url" && \
		$(GO) run ./cmd/riverslot bench --database-url "$$url" $(BENCH_FLAGS)
	$(GO) test -run '^$$' -bench Week -benchtime 1x ./cmd/riverslot/internal/sim

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: lint
lint: ## gofmt, go vet, go mod tidy -diff and staticcheck (staticcheck.conf)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	@# staticcheck is built while vet compiles the packages: a cold build's
	@# longest packages (modernc.org/sqlite) leave a core idle.
	@GOBIN=$(CURDIR)/.bin $(GO) install $(STATICCHECK) & sc=$$!; \
		echo "$(GO) vet -race ./... (and go install staticcheck beside it)"; \
		$(GO) vet -race ./...; v=$$?; wait $$sc; s=$$?; \
		if [ $$s -ne 0 ]; then echo "go install $(STATICCHECK) failed"; fi; exit $$((v | s)) # -race: compiles the packages as make test does, which then reuses them
	$(GO) mod tidy -diff
	GOFLAGS=-race .bin/staticcheck ./... # loads the packages vet -race compiled

.PHONY: fuzz
fuzz: ## Run the fuzz targets for 30s each
	$(GO) test ./slotplan -run '^$$' -fuzz FuzzPlan -fuzztime 30s
	$(GO) test ./sqlbucket -run '^$$' -fuzz FuzzBucketMirror -fuzztime 30s
