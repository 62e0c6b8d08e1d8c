# Releases. The published modules are the user API (pkg), one module per
# store client (pgstore, redisstore, dynamostore, dbpool, storeenv), one per
# framework adapter, and the operations command (cmd/keystore); each is
# tagged DIR/vX.Y.Z. Between releases they require each other at v0.0.0
# and go.work joins them. The release check (internal/release, part of
# make test) builds outside modules through a proxy of the working tree.

.PHONY: release-proxy
release-proxy: ## Write a module proxy of the working tree's published modules: make release-proxy VERSION=vX.Y.Z DIR=path
	@test -n "$(VERSION)" -a -n "$(DIR)" || { echo "usage: make release-proxy VERSION=vX.Y.Z DIR=path" >&2; exit 2; }
	@$(GO) run ./cmd/release proxy -version $(VERSION) -dir $(DIR)

.PHONY: release
release: ## Prepare a release: siblings at VERSION in each go.mod, changelog and API checked, consumers built; prints the tags, pushes nothing
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z" >&2; exit 2; }
	@$(GO) run ./cmd/release tag -version $(VERSION)

.PHONY: tidy
tidy: ## go mod tidy in every module (each on its own, its siblings from this checkout)
	@$(GO) run ./cmd/release tidy
