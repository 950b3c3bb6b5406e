# riverslot. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO ?= go
PG := scripts/pg.sh

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-10s %s\n", $$1, $$2}'

.PHONY: test
# -p 1: one test binary at a time keeps connections under Postgres' default
# max_connections (100); -parallel 16: the integration tests mostly wait on
# real cycles, not on the 2 CPUs. -count=1: the database is an input Go's
# test cache cannot see, so results are never replayed from the cache.
test: ## Get a Postgres (see scripts/pg.sh), create riverslot_test, run go test -race ./...
	@url=$$($(PG) riverslot_test) && echo "test database: $$url" && \
		TEST_DATABASE_URL="$$url" $(GO) test -race -count=1 -p 1 -parallel 16 -timeout 15m ./...

.PHONY: demo
demo: ## Run one compressed live cycle of slot scheduling (riverslot demo)
	@url=$$($(PG) riverslot_demo) && echo "demo database: $$url" && \
		$(GO) run ./cmd/riverslot demo --database-url "$$url" $(DEMO_FLAGS)

.PHONY: bench
bench: ## Run the benchmarks against a real Postgres (BENCH_FLAGS for sizes)
	@url=$$($(PG) riverslot_bench) && echo "bench database: $$url" && \
		$(GO) run ./cmd/riverslot bench --database-url "$$url" $(BENCH_FLAGS)
	$(GO) test -run '^$$' -bench Week -benchtime 1x ./internal/sim

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
