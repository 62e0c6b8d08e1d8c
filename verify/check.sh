#!/usr/bin/env bash
# Model-checks verify/idempotency.pml with spin: the exhaustive search of
# each size below must find no violation, and each mutation (one rule of
# the protocol removed) must make its named property fail. On a violation
# of the unmutated model the error trail is replayed and printed.
#
#   verify/check.sh             every size and every mutation
#   verify/check.sh sizes       the sizes only
#   verify/check.sh mutations   the mutations only
#
# Environment: VERIFY_EXTRA (more -D options for every size: a mutation's
# switch there shows its trail), SPIN (default spin), CC (default cc), VERIFY_WORK (the build
# directory; default .local/verify), VERIFY_MEM_MB (pan's memory bound,
# default 2048: the largest size needs about 1.3 GB).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
model="$root/verify/idempotency.pml"
work="${VERIFY_WORK:-$root/.local/verify}"
spin="${SPIN:-spin}"
cc="${CC:-cc}"
mem="${VERIFY_MEM_MB:-2048}"
what="${1:-all}"

command -v "$spin" >/dev/null 2>&1 || { echo "verify: spin is not installed (apt-get install spin, or make deps)" >&2; exit 1; }
command -v "$cc" >/dev/null 2>&1 || { echo "verify: a C compiler is needed to build spin's verifier (apt-get install gcc)" >&2; exit 1; }

# The sizes searched exhaustively: name, then the model's -D options.
# Times are ticks; B=1 (a good clock reads T-1, T or T+1), M=2, RUN=1, H=6
# (so that min(M, H/3) = 2B). heartbeat-renewals spends its faults on lost
# requests and replies only (no crashes), so that two of them can hit one
# heartbeat run's renewals.
sizes=(
  "two-invocations    -DN=2 -DFAULTS=2 -DTMAX=5 -DRUN=1"
  "environment        -DN=3 -DFAULTS=1 -DTMAX=5 -DRUN=1 -DHEARTBEAT -DCACHE"
  "same-token-retry   -DN=2 -DFAULTS=3 -DTMAX=5 -DRUN=1 -DSAME_TOKEN -DCACHE"
  "heartbeat-renewals -DN=2 -DFAULTS=2 -DTMAX=5 -DRUN=1 -DHEARTBEAT -DNO_CRASH"
)

# The mutations: the switch, the property it must break, the size's options.
mutations=(
  "M_TAKER_CLOCK        P1 -DN=2 -DFAULTS=0 -DTMAX=5 -DRUN=1"
  "M_STORE_CLOCK        P1 -DN=2 -DFAULTS=0 -DTMAX=5 -DRUN=1"
  "M_NO_MARGIN          P5 -DN=2 -DFAULTS=0 -DTMAX=5 -DRUN=1"
  "M_FIXED_LEASE        P5 -DN=2 -DFAULTS=0 -DTMAX=5 -DRUN=2"
  "M_TAKEOVER_COMPLETED P2 -DN=2 -DFAULTS=0 -DTMAX=5 -DRUN=1"
  "M_RELEASE_ANY_STATUS P2 -DN=2 -DFAULTS=3 -DTMAX=5 -DRUN=1 -DSAME_TOKEN"
  "M_CACHE_ANY_FINISH   P3 -DN=3 -DFAULTS=0 -DTMAX=5 -DRUN=1 -DHEARTBEAT -DCACHE"
  "M_RELEASE_ANY_OWNER  P4 -DN=2 -DFAULTS=1 -DTMAX=5 -DRUN=1"
  "M_COMPLETE_ANY_OWNER P4 -DN=2 -DFAULTS=0 -DTMAX=5 -DRUN=1 -DHEARTBEAT"
  "M_RENEW_ANY_OWNER    P4 -DN=2 -DFAULTS=0 -DTMAX=5 -DRUN=1 -DHEARTBEAT"
  "M_NO_LOCAL_CANCEL    P6 -DN=2 -DFAULTS=0 -DTMAX=5 -DRUN=1 -DHEARTBEAT"
  "M_GRANT_AT_REPLY     P6 -DN=2 -DFAULTS=0 -DTMAX=5 -DRUN=1 -DHEARTBEAT"
)

mkdir -p "$work"
cp "$model" "$work/idempotency.pml"
cd "$work"

# build OPTIONS...: generate and compile the verifier for these options.
build() {
  rm -f pan pan.* idempotency.pml.trail
  "$spin" "$@" -a idempotency.pml >spin.out 2>&1 || { cat spin.out >&2; return 1; }
  # SAFETY: assertions and end states; COLLAPSE: exact state compression.
  "$cc" -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM="$mem" -o pan pan.c
}

# search: run the exhaustive search; its output is in pan.out.
search() {
  ./pan -m200000 -w24 >pan.out 2>&1 || true
  if grep -q "out of memory\|MEMLIM bound\|max search depth too small\|Search not completed" pan.out && grep -q "errors: 0" pan.out; then
    echo "verify: the search did not complete (memory or depth bound); see $work/pan.out" >&2
    return 2
  fi
}

# trail OPTIONS...: the violation's trail, replayed.
trail() {
  "$spin" "$@" -t -p -g idempotency.pml 2>&1 | grep -vE '^\s*$' || true
}

failed=0
summary=()

if [ "$what" = all ] || [ "$what" = sizes ]; then
  for entry in "${sizes[@]}"; do
    read -r name opts <<<"$entry"
    opts="$opts ${VERIFY_EXTRA:-}"
    echo "verify: size $name ..." >&2
    # shellcheck disable=SC2086
    build $opts
    start=$(date +%s.%N)
    search || { failed=1; continue; }
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    states=$(awk '/states, stored/ { print $1 }' pan.out)
    trans=$(awk '/transitions \(= stored\+matched\)/ { print $1 }' pan.out)
    memory=$(awk '/total actual memory usage/ { print $1 }' pan.out)
    if grep -q "errors: 0" pan.out; then
      summary+=("ok    $name ($opts): $states states, $trans transitions, ${memory} MB, ${secs}s; P1-P6 hold")
    else
      failed=1
      summary+=("FAIL  $name ($opts): a property is violated")
      echo "verify: $name: violation; the trail:" >&2
      # shellcheck disable=SC2086
      trail $opts >&2
      grep -E "assertion violated|VIOLATION" pan.out >&2 || true
    fi
  done
fi

if [ "$what" = all ] || [ "$what" = mutations ]; then
  for entry in "${mutations[@]}"; do
    read -r mutation prop opts <<<"$entry"
    # shellcheck disable=SC2086
    echo "verify: mutation $mutation ..." >&2
    build -D"$mutation" $opts
    search || { failed=1; continue; }
    if grep -q "errors: 0" pan.out; then
      failed=1
      summary+=("FAIL  $mutation: expected $prop to fail, but the search found no violation")
      continue
    fi
    # shellcheck disable=SC2086
    seen=$(trail -D"$mutation" $opts | grep -o 'VIOLATION P[0-9]' | head -1 | cut -d' ' -f2)
    if [ "$seen" = "$prop" ]; then
      depth=$(grep -o 'at depth [0-9]*' pan.out | head -1)
      summary+=("ok    $mutation: $prop fails as expected ($depth)")
    else
      failed=1
      summary+=("FAIL  $mutation: expected $prop to fail, but the trail shows ${seen:-no named property}")
    fi
  done
fi

printf '%s\n' "${summary[@]}"
exit "$failed"
