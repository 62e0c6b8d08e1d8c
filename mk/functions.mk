# The Lambda functions: SAM's build-<LogicalId> targets (BuildMethod:
# makefile, CodeUri: .) and `make build`, which builds all of them into bin/.
#
# `sam build` runs `make build-<LogicalId>` with ARTIFACTS_DIR set to the
# function's artifact folder; the provided.al2023 runtime runs the file
# named bootstrap from there. Functions are static linux/arm64 binaries
# (CGO_ENABLED=0) with the RPC mode of aws-lambda-go left out (lambda.norpc).

# Logical id -> folder under functions/.
FUNCTION_DIRS := \
	CreateTaskFunction=create-task \
	ListTasksFunction=list-tasks \
	GetTaskFunction=get-task \
	UpdateTaskFunction=update-task \
	DeleteTaskFunction=delete-task \
	MigrateFunction=migrate \
	PurgeCheckFunction=purge-check \
	TaskActivityFunction=task-activity

FUNCTIONS := $(foreach f,$(FUNCTION_DIRS),$(firstword $(subst =, ,$(f))))
function_dir = $(word 2,$(subst =, ,$(filter $(1)=%,$(FUNCTION_DIRS))))

LAMBDA_GOOS      := linux
LAMBDA_GOARCH    := arm64
LAMBDA_BUILD     := GOOS=$(LAMBDA_GOOS) GOARCH=$(LAMBDA_GOARCH) CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags "-s -w"
BUILD_DIR        ?= bin

define build_function
.PHONY: build-$(1)
build-$(1):
	@test -n "$$(ARTIFACTS_DIR)" || { echo "ARTIFACTS_DIR is not set (sam build sets it; try: make build)" >&2; exit 2; }
	$(LAMBDA_BUILD) -o $$(ARTIFACTS_DIR)/bootstrap ./functions/$(call function_dir,$(1))
endef
$(foreach f,$(FUNCTIONS),$(eval $(call build_function,$(f))))

.PHONY: build
build: ## Build every function's bootstrap (linux/arm64) into bin/<LogicalId>/
	@for f in $(FUNCTIONS); do \
	  $(MAKE) --no-print-directory build-$$f ARTIFACTS_DIR=$(CURDIR)/$(BUILD_DIR)/$$f || exit 1; \
	done
	@echo "built $(words $(FUNCTIONS)) functions into $(BUILD_DIR)/"
