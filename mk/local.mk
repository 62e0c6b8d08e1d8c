# Running the task API on this machine with no AWS account and no Docker
# (docs/local.md): `make run` serves it on http://127.0.0.1:3000 as API
# Gateway would, `make token` prints a bearer token for it, and
# `make invoke` runs one function's real bootstrap under the Lambda Runtime
# Interface Emulator with one event.

RIE_MODULE := github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d
RIE        := $(LOCAL)/bin/aws-lambda-rie
ADDR       ?= 127.0.0.1:$(or $(PORT),3000)

.PHONY: run
run: ## Serve the API on http://127.0.0.1:3000 (PORT=, or DATABASE_URL= to use that database)
	@$(GO) build -o $(LOCAL)/bin/localapi ./cmd/localapi && exec $(LOCAL)/bin/localapi -addr $(ADDR)

.PHONY: token
token: ## Print a bearer token for the local API (SUB=<uuid>, TTL=12h; EXPIRED=1 for an expired one)
	@$(GO) run ./cmd/token $(if $(SUB),-sub $(SUB)) $(if $(TTL),-ttl $(TTL)) $(if $(EXPIRED),-expired)

.PHONY: invoke
invoke: rie ## Run FN=<LogicalId> with EVENT=events/<file>.json under the Lambda emulator
	@test -n "$(FN)" -a -n "$(EVENT)" || { echo "usage: make invoke FN=<LogicalId> EVENT=events/<file>.json" >&2; exit 2; }
	@url=$$($(GO) run ./cmd/devdb start) && \
	  AWS_LAMBDA_RIE=$(RIE) $(GO) run ./cmd/invoke -fn $(FN) -event $(EVENT) -database-url "$$url"

.PHONY: rie
rie: $(RIE) ## Install the Lambda Runtime Interface Emulator into .local/bin

$(RIE):
	@echo "installing aws-lambda-rie into $(LOCAL)/bin" >&2
	@GOBIN=$(LOCAL)/bin CGO_ENABLED=0 $(GO) install $(RIE_MODULE)
