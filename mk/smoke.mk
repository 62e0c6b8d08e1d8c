# `make smoke` (docs/smoke.md): the first thing to run after `sam deploy`.
# With STACK=<name> it checks the deployed stack through the AWS CLI (its
# outputs, a Cognito test user it deletes afterwards, the HTTP contract, the
# task events queue, the purge's last run with SMOKE_DATABASE_URL). Without
# STACK it checks the local API at http://$(ADDR), starting it (and the
# private PostgreSQL) when nothing answers there and stopping what it
# started; the parts that need AWS are reported as SKIP. A token can be
# given in SMOKE_TOKEN (the environment keeps it off the command line).

SMOKE_CMDS := ./cmd/idemcheck ./cmd/smoke ./cmd/localapi ./cmd/localqueue

.PHONY: smoke
smoke: ## Check the idempotency contract end to end: the stack STACK= (REGION=) after sam deploy, else the local API (started if needed)
	@mkdir -p $(LOCAL)/bin
	@$(GO) build -o $(LOCAL)/bin/ $(SMOKE_CMDS)
	@$(LOCAL)/bin/smoke -bin $(LOCAL)/bin \
	  $(if $(STACK),-stack '$(STACK)' $(if $(REGION),-region '$(REGION)') $(if $(URL),-url '$(URL)'),-url '$(or $(URL),http://$(ADDR))')

.PHONY: idemcheck
idemcheck: ## Build the black-box Idempotency-Key checker into .local/bin (idemcheck -h for its flags)
	@mkdir -p $(LOCAL)/bin
	@$(GO) build -o $(LOCAL)/bin/ ./cmd/idemcheck && echo "$(LOCAL)/bin/idemcheck"
