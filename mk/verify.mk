# The protocol, model-checked. `make verify` (part of `make test`) runs spin
# over verify/idempotency.pml: the exhaustive search of each size in
# verify/check.sh must find no violation of the properties P1–P5, and each
# mutation (one rule of the protocol removed) must make its property fail,
# so that the check is known to be able to fail. It takes about a minute and
# a half on 2 cores and at most about 1.2 GB of memory. spin comes from
# scripts/install-deps.sh (Debian's spin package). The figures are in
# docs/reliability.md; the approach in docs/adr (verification).

.PHONY: verify
verify: deps ## Model-check the protocol with spin (every size, every mutation); part of make test
	@bash verify/check.sh
