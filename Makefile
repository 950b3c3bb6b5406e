# riverslot. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO ?= go
PG := scripts/pg.sh

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-10s %s\n", $$1, $$2}'

.PHONY: test
# scripts/test.sh says how: two streams of go test side by side (the suite
# mostly waits on real cycles), -race for the library's packages, one
# report at the end; .test-output.json keeps go test's raw -json stream.
# PG_OWN=1: scripts/pg.sh starts a throwaway cluster for the tests when the
# PostgreSQL server binaries are installed (TEST_DATABASE_URL overrides).
# INTEGRATION_PARALLEL: integration_test's top-level tests at once (40 at
# once drove sync lateness p50 to 17 s on 2 cores; 16 at once, load average
# 25-35 on a new 2-core machine, failed five real-cycle bounds in one CI run).
TEST_DB ?= riverslot_test
INTEGRATION_PARALLEL ?= 10
test: ## Get a Postgres (scripts/pg.sh), create riverslot_test, run every package's tests (scripts/test.sh), list the slowest
	@GO=$(GO) TEST_DB=$(TEST_DB) INTEGRATION_PARALLEL=$(INTEGRATION_PARALLEL) bash scripts/test.sh

.PHONY: build
build: ## Compile every package and the riverslot binary (what make test compiles first; .ci/run does it while Chromium installs)
	$(GO) build ./...
	$(GO) build -o .bin/riverslot ./cmd/riverslot

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
lint: ## gofmt, go mod tidy -diff, go vet and staticcheck (staticcheck.conf)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) mod tidy -diff
	@# staticcheck is built while vet compiles the packages: a cold build's
	@# longest packages (modernc.org/sqlite) leave a core idle.
	@GOBIN=$(CURDIR)/.bin $(GO) install $(STATICCHECK) & sc=$$!; \
		echo "$(GO) vet ./... (and go install staticcheck beside it)"; \
		$(GO) vet ./...; v=$$?; wait $$sc; s=$$?; \
		if [ $$s -ne 0 ]; then echo "go install $(STATICCHECK) failed"; fi; exit $$((v | s))
	.bin/staticcheck ./...

.PHONY: fuzz
fuzz: ## Run the fuzz targets for 30s each
	$(GO) test ./slotplan -run '^$$' -fuzz FuzzPlan -fuzztime 30s
	$(GO) test ./sqlbucket -run '^$$' -fuzz FuzzBucketMirror -fuzztime 30s
