# The protocol, model-checked. `make verify` (part of `make test`) runs spin
# over verify/idempotency.pml: the exhaustive search of each size in
# verify/check.sh must find no violation of the properties P1–P6, and each
# mutation (one rule of the protocol removed) must make its property fail,
# so that the check is known to be able to fail. It takes about four minutes
# on 2 cores and at most about 1.3 GB of memory. spin comes from
# scripts/install-deps.sh (Debian's spin package). The figures are in
# docs/reliability.md; the approach in docs/adr (verification).

.PHONY: verify
verify: deps ## Model-check the protocol with spin (every size, every mutation); part of make test
	@bash verify/check.sh

# The histories of test/history, long: a minute on each store (PostgreSQL,
# Redis, DynamoDB on moto) with four worker processes of eight goroutines
# and one of heartbeat runs, renewal outages, pauses and kills all along. The short
# version (6 s on each store) runs in make test. The table rows are printed
# at the end, for docs/reliability.md. `make soak` runs this too.
HISTORY_FIGURES := $(LOCAL)/history-figures.md

.PHONY: soak-history
soak-history: deps ## Long histories checked under faults on PostgreSQL, Redis, Valkey and DynamoDB (porcupine); part of make soak
	@mkdir -p $(LOCAL)
	@rm -f $(HISTORY_FIGURES)
	@$(GO) run ./cmd/devdb url >/dev/null
	@set -o pipefail; \
	  ICHIDO_HISTORY_FIGURES=$(HISTORY_FIGURES) $(GO) test -count=1 -timeout 10m -run '^TestHistory$$' -v ./test/history -args -soak 2>&1 | tee $(LOCAL)/history.log | grep -E '^(=== RUN|--- |\s+history_test.go:[0-9]+: (postgres|redis|valkey|dynamodb):|ok|FAIL|PASS)'; status=$$?; \
	  $(GO) run ./cmd/devdb stop; \
	  cat $(HISTORY_FIGURES) 2>/dev/null; \
	  exit $$status

soak: soak-history
