# ichido: an idempotency layer for Go services on AWS Lambda.
# `make help` lists the targets. SAM's build-<LogicalId> targets live in mk/.

SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
GOTESTFLAGS ?=
LOCAL     := $(CURDIR)/.local

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
db-start: ## Start the private PostgreSQL (pg_cron preloaded) and print its URL
	@$(GO) run ./cmd/devdb start

.PHONY: db-stop
db-stop: ## Stop the private PostgreSQL
	@$(GO) run ./cmd/devdb stop

.PHONY: test
test: deps ## Run every test against real servers, then stop them
	@mkdir -p $(LOCAL)
	@rm -f $(LOCAL)/rehearse.txt
	@$(GO) run ./cmd/devdb url >/dev/null
	@set -o pipefail; \
	  $(GO) test $(GOTESTFLAGS) -count=1 -timeout 14m ./... 2>&1 | tee $(LOCAL)/test.log; status=$$?; \
	  cat $(LOCAL)/rehearse.txt 2>/dev/null; \
	  $(GO) run ./cmd/devdb stop; \
	  $(MAKE) --no-print-directory test-stop-extra; \
	  exit $$status

.PHONY: test-stop-extra
test-stop-extra:: ## (internal) stop servers other test targets started
	@true

.PHONY: vet
vet: ## go vet and gofmt
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)

.PHONY: clean
clean: ## Stop the private servers and remove .local/
	-@$(GO) run ./cmd/devdb stop
	rm -rf $(LOCAL)
