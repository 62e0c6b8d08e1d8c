# Long reliability runs. `make soak` runs the long cases of test/reliability
# (many rounds of concurrency, kill, crash and outage, a minute of load) and
# a bounded fuzzing run on a private PostgreSQL cluster of its own, then
# writes docs/reliability.md. It takes about 3 minutes on 2 cores, plus a few
# more the first time, when the instrumented fuzzing build is compiled.

SOAK_FUZZTIME ?= 60s

.PHONY: soak
soak: deps ## Long reliability runs (concurrency, kills, crashes, fuzzing, load); writes docs/reliability.md
	@mkdir -p $(LOCAL)
	@GO=$(GO) $(GO) run ./cmd/soak -out docs/reliability.md -fuzztime $(SOAK_FUZZTIME)
