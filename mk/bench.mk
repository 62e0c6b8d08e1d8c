# `make bench`: measure the project on this machine in one run and write
# docs/performance.md, its plots (docs/performance/*.png) and the raw figures
# (docs/performance/results.json). See cmd/bench.
#
# PostgreSQL: with DATABASE_URL set, the bench works in a schema of its own
# there and drops it at the end. Otherwise it starts a private cluster of its
# own (internal/testkit/pgtest) rather than the shared one of `make db-start`: it records
# and fixes the durability settings it compares (fsync, synchronous_commit
# on), puts a few GB of keys in, and must not be stopped halfway by a
# concurrent `make test`. Redis: a private redis-server and a private Valkey
# 8.1 (internal/testkit/redistest; make deps builds Valkey).
# DynamoDB: a private moto_server (internal/testkit/dynamotest), for the requests and
# capacity of the DynamoDB store, never for its latency.

BENCHFLAGS ?=

.PHONY: bench
bench: deps rie ## Measure on this machine (about 20 min on 2 cores); writes docs/performance.md
	$(GO) run ./cmd/bench -rie $(RIE) $(BENCHFLAGS)

.PHONY: bench-quick
bench-quick: deps rie ## Check the benchmark harness end to end in a few minutes (writes .local/bench/)
	$(GO) run ./cmd/bench -quick -rie $(RIE) $(BENCHFLAGS)

# `make bench-peers GOPOTENCY=path`: ichido's replay beside gopotency v1.0.0,
# the library itself, built from a checkout of its source (the Go module
# proxy does not serve it) in a module outside the repository that installs
# ichido from a proxy of the working tree. See cmd/benchpeers.
GOPOTENCY ?=

.PHONY: bench-peers
bench-peers: deps ## ichido's replay beside gopotency v1.0.0 itself: make bench-peers GOPOTENCY=path (a checkout of its v1.0.0 tag)
	@test -n "$(GOPOTENCY)" || { echo "usage: make bench-peers GOPOTENCY=path (a checkout of github.com/fco-gt/gopotency at its v1.0.0 tag)" >&2; exit 2; }
	$(GO) run ./cmd/benchpeers -gopotency $(GOPOTENCY)
