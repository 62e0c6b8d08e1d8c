# Running the task API on this machine with no AWS account and no Docker
# (docs/local.md): `make run` serves it on http://127.0.0.1:3000 as API
# Gateway would, `make token` prints a bearer token for it, and
# `make invoke` runs one function's real bootstrap under the Lambda Runtime
# Interface Emulator with one event.

RIE_MODULE := github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d
RIE        := $(LOCAL)/bin/aws-lambda-rie
ADDR       ?= 127.0.0.1:$(or $(PORT),3000)

.PHONY: run
run: ## Serve the API on http://127.0.0.1:3000 (PORT=, or DATABASE_URL= to use that database; TRACES=stdout prints the idempotency spans)
	@$(GO) build -o $(LOCAL)/bin/localapi ./cmd/localapi && \
	  $(if $(TRACES),ICHIDO_TRACES='$(TRACES)') exec $(LOCAL)/bin/localapi -addr $(ADDR)

.PHONY: token
token: ## Print a bearer token for the local API (SUB=<uuid or any subject, e.g. 'auth0|…'>, TTL=12h; EXPIRED=1 for an expired one)
	@$(GO) run ./cmd/token $(if $(SUB),-sub '$(SUB)') $(if $(TTL),-ttl $(TTL)) $(if $(EXPIRED),-expired)

.PHONY: invoke
invoke: rie ## Run FN=<LogicalId> with EVENT=events/<file>.json under the Lambda emulator
	@test -n "$(FN)" -a -n "$(EVENT)" || { echo "usage: make invoke FN=<LogicalId> EVENT=events/<file>.json" >&2; exit 2; }
	@test -x $(LOCAL)/invoke/$(FN)/bootstrap || echo "make invoke: the first run compiles the tools and $(FN) (the AWS SDK and pgx among them), which takes a few minutes on two cores; later runs take seconds" >&2
	@url=$$($(GO) run ./cmd/devdb start) && \
	  AWS_LAMBDA_RIE=$(RIE) $(GO) run ./cmd/invoke -fn $(FN) -event $(EVENT) -database-url "$$url"

.PHONY: rie
rie: $(RIE) ## Install the Lambda Runtime Interface Emulator into .local/bin

$(RIE):
	@echo "installing aws-lambda-rie into $(LOCAL)/bin" >&2
	@GOBIN=$(LOCAL)/bin CGO_ENABLED=0 $(GO) install $(RIE_MODULE)

SQS_EVENTS := sqs-task-events.json sqs-task-events-redelivery.json sqs-task-events-fifo.json

.PHONY: invoke-sqs
invoke-sqs: rie ## Replay the SQS sample batches under the emulator; each must answer events/expected/<file>
	@url=$$($(GO) run ./cmd/devdb start) && $(GO) build -o $(LOCAL)/bin/invoke ./cmd/invoke && \
	  for e in $(SQS_EVENTS); do \
	    echo "== events/$$e (expect events/expected/$$e)" >&2; \
	    AWS_LAMBDA_RIE=$(RIE) $(LOCAL)/bin/invoke -fn TaskActivityFunction -event events/$$e \
	      -expect events/expected/$$e -database-url "$$url" || exit 1; \
	  done

.PHONY: feed
feed: ## Feed task events (JSON lines on stdin, or FILE=) to TaskActivityFunction's handler as the SQS queue would
	@url=$$($(GO) run ./cmd/devdb start) && \
	  $(GO) run ./cmd/localqueue -database-url "$$url" $(if $(FILE),-file $(FILE)) $(if $(FIFO),-fifo)

.PHONY: serve-http
serve-http: ## Serve the task API as a plain net/http server with the idempotency middleware (ECS Fargate shape; PORT= defaults to 8080)
	@url=$${DATABASE_URL:-$$($(GO) run ./cmd/devdb start)} && $(GO) build -o $(LOCAL)/bin/taskserver ./cmd/taskserver && \
	  DATABASE_URL="$$url" exec $(LOCAL)/bin/taskserver -addr 127.0.0.1:$(or $(PORT),8080)
