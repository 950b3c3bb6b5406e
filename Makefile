# riverslot. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO ?= go
PG := scripts/pg.sh

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-10s %s\n", $$1, $$2}'

.PHONY: test
# -p 1: one test package at a time. The integration tests run real River
# clients and worker processes on short real cycles, and a second package
# beside them (two at a time was tried) starved them of the 2 CPUs: sync
# lateness p50 reached 31 s and syncs went stale. TEST_P=2 runs two at a
# time on a bigger machine (it needs about 140 connections).
# -parallel 16: parallel tests within a package. -count=1: the database is
# an input Go's test cache cannot see, so results are never replayed.
# scripts/testreport prints each package's result, the output of failed
# tests, and the slowest tests and packages at the end.
TEST_DB ?= riverslot_test
TEST_P ?= 1
test: ## Get a Postgres (see scripts/pg.sh), create riverslot_test, run go test -race ./..., list the slowest tests
	@set -o pipefail; url=$$($(PG) $(TEST_DB)) && echo "test database: $$url" && \
		$(GO) build -o .testreport ./scripts/testreport && \
		TEST_DATABASE_URL="$$url" $(GO) test -json -race -count=1 -p $(TEST_P) -parallel 16 -timeout 20m ./... | ./.testreport -slowest 15

.PHONY: demo
demo: ## Run one compressed live cycle of slot scheduling (riverslot demo)
	@url=$$($(PG) riverslot_demo) && echo "demo database: $$url" && \
		$(GO) run ./cmd/riverslot demo --database-url "$$url" $(DEMO_FLAGS)

.PHONY: bench
bench: ## Run the benchmarks against a real Postgres (BENCH_FLAGS for sizes)
	@url=$$($(PG) riverslot_bench) && echo "bench database: $$url" && \
		$(GO) run ./cmd/riverslot bench --database-url "$$url" $(BENCH_FLAGS)
	$(GO) test -run '^$$' -bench Week -benchtime 1x ./cmd/riverslot/internal/sim

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: lint
lint: ## gofmt, go vet, go mod tidy -diff and staticcheck (staticcheck.conf)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	$(GO) run $(STATICCHECK) ./...

.PHONY: fuzz
fuzz: ## Run the fuzz targets for 30s each
	$(GO) test ./slotplan -run '^$$' -fuzz FuzzPlan -fuzztime 30s
	$(GO) test ./sqlbucket -run '^$$' -fuzz FuzzBucketMirror -fuzztime 30s
