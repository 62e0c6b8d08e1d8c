# ichido: an idempotency layer for Go services on AWS Lambda.
# `make help` lists the targets. SAM's build-<LogicalId> targets live in mk/.

SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
GOTESTFLAGS ?=
LOCAL     := $(CURDIR)/.local

# DB_PORT chooses the TCP port of the private PostgreSQL that tests and local
# runs share (make run DB_PORT=5544); without it a free port is taken once.
ifneq ($(DB_PORT),)
export ICHIDO_DB_PORT := $(DB_PORT)
endif

include $(sort $(wildcard mk/*.mk))

.PHONY: help
# Targets whose description starts with "(internal)" are left out; colour
# only when the output is a terminal.
help: ## Show this help
	@if [ -t 1 ]; then on='\033[36m'; off='\033[0m'; else on=; off=; fi; \
	  awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_%-]+:.*## / && $$2 !~ /^\(internal\)/ {printf "  %s%-18s%s %s\n", on, $$1, off, $$2}' $(MAKEFILE_LIST) | sort

.PHONY: deps
deps: ## Install what the tests and local runs need (apt when root; pip for cfn-lint)
	@bash scripts/install-deps.sh

.PHONY: db-start
db-start: ## Start the private PostgreSQL (pg_cron preloaded) and print its URL (DB_PORT= chooses its port)
	@$(GO) run ./cmd/devdb start

.PHONY: db-stop
db-stop: ## Stop the private PostgreSQL
	@$(GO) run ./cmd/devdb stop

# The repository holds several Go modules, used together through go.work
# (see go.work and mk/release.mk). `./...` at the root covers the sample
# app's module alone; the pattern `work` covers the packages of every module
# of go.work. A test run must leave the tree as it found it: the go.mod,
# go.sum and go.work.sum files are compared before and after.
.PHONY: test
test: modfiles-before deps lint verify ## Lint, model-check, then run every test against real servers and stop them
	@mkdir -p $(LOCAL)
	@rm -f $(LOCAL)/rehearse.txt
	@$(GO) run ./cmd/devdb url >/dev/null
	@set -o pipefail; \
	  export PGSTORE_TEST_DATABASE="$$($(GO) run ./cmd/devdb url)"; \
	  $(GO) test $(GOTESTFLAGS) -count=1 -timeout 14m work 2>&1 | tee $(LOCAL)/test.log; status=$$?; \
	  if [ $$status -eq 0 ]; then \
	    $(GO) test $(GOTESTFLAGS) -race -count=1 -timeout 14m $(RACE_PKGS) 2>&1 | tee -a $(LOCAL)/test.log; status=$$?; \
	  fi; \
	  if [ $$status -eq 0 ]; then \
	    ICHIDO_TEST_ANYWHERE=1 $(GO) test $(GOTESTFLAGS) -count=1 -timeout 10m ./test/anywhere 2>&1 | tee -a $(LOCAL)/test.log; status=$$?; \
	  fi; \
	  cat $(LOCAL)/rehearse.txt 2>/dev/null; \
	  $(GO) run ./cmd/devdb stop; \
	  $(MAKE) --no-print-directory test-stop-extra; \
	  if [ $$status -eq 0 ] && ! git status --porcelain -- '*.mod' '*.sum' | cmp -s - $(LOCAL)/modfiles-before.txt; then \
	    echo "make test: the tests changed these go.mod/go.sum files; commit them as the go commands leave them:" >&2; \
	    git status --porcelain -- '*.mod' '*.sum' >&2; status=1; \
	  fi; \
	  exit $$status

# RACE_PKGS run a second time, under the race detector, in make test: the
# engine, the adapters and the webhook receiver, whose requests share one
# Config across goroutines.
RACE_PKGS := ./pkg/idempotency ./pkg/idempotency/webhook ./pkg/idempotency/grpcidem \
  ./pkg/idempotency/connectidem ./pkg/idempotency/ginidem ./pkg/idempotency/echoidem \
  ./pkg/idempotency/otelidem ./internal/libtest/webhook ./internal/libtest/grpcidem \
  ./internal/libtest/connectidem ./internal/libtest/ginidem ./internal/libtest/echoidem \
  ./internal/libtest/otelidem ./internal/libtest/logdigest

# The copy of the project in a closed folder runs after the other packages,
# not beside them: it starts servers of its own, and the load would slow
# the timed cases of the others.
.PHONY: test-anywhere
test-anywhere: deps ## Run the tests of a copy of the project in a folder of mode 0700 (part of make test)
	@ICHIDO_TEST_ANYWHERE=1 $(GO) test $(GOTESTFLAGS) -count=1 -v -timeout 10m ./test/anywhere

.PHONY: modfiles-before
modfiles-before: ## (internal) note which go.mod and go.sum files differ from git before a test run
	@mkdir -p $(LOCAL)
	@git status --porcelain -- '*.mod' '*.sum' > $(LOCAL)/modfiles-before.txt 2>/dev/null || true

.PHONY: test-stop-extra
test-stop-extra:: ## (internal) stop servers other test targets started
	@true

# `make lint` is part of `make test`: a change lands only with a clean tree.
# It checks every module of go.work (pattern work). staticcheck is the
# version pinned by go.mod's tool directive (go tool staticcheck), so every
# clone runs the same checks; a finding that is a deliberate choice is
# silenced where it stands, with a reason: //lint:ignore <check> <why>.
.PHONY: lint
lint: ## go vet, gofmt and staticcheck (pinned in go.mod); part of make test
	@$(GO) vet work || { echo >&2; echo "make lint: go vet found the problems above; fix them (make test runs make lint)" >&2; exit 1; }
	@files="$$(gofmt -l $$(git ls-files '*.go'))"; test -z "$$files" || { echo "make lint: these files are not gofmt-formatted; run gofmt -w on them:" >&2; echo "$$files" >&2; exit 1; }
	@$(GO) tool staticcheck work || { echo >&2; echo "make lint: staticcheck found the problems above (file:line: message (check)); fix them, or silence a deliberate one with //lint:ignore <check> <reason> (make test runs make lint)" >&2; exit 1; }

.PHONY: vet
vet: lint ## Same as lint

.PHONY: clean
clean: ## Stop the private servers and remove .local/
	-@$(GO) run ./cmd/devdb stop
	rm -rf $(LOCAL)
