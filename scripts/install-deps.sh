#!/usr/bin/env bash
# Installs what the tests and local runs need on Debian or Ubuntu: the
# PostgreSQL 15 server with pg_cron, Redis, and pgbouncer (the local stand-in
# for RDS Proxy). As root it uses apt; otherwise it names what to install.
set -euo pipefail

need=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
[ -f /usr/share/postgresql/15/extension/pg_cron.control ] || need+=(postgresql-15-cron)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
command -v psql >/dev/null 2>&1 || need+=(postgresql-client-15)

[ ${#need[@]} -eq 0 ] && exit 0

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
