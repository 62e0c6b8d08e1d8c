#!/usr/bin/env bash
# Builds the Valkey server that the Redis store's tests and `make bench` run
# beside Debian's Redis 7.0: Valkey 8.1 has SET … IFEQ, the native
# compare-and-set the store's completion uses where the server has it
# (docs/adr/0101-redis-native-fenced-completion.md), and Debian 12 ships no
# server that has it (its Redis is 7.0, bookworm-backports' Valkey 8.0).
#
# The source is Debian's own upstream tarball of Valkey 8.1.1 (the one
# Debian 13 builds its package from), checked against the SHA-256 pinned
# below, built with the system's C compiler into .local/valkey/<version>;
# nothing is installed system-wide. The build leaves out TLS and systemd and
# uses the C library's allocator, so that it needs no library beyond libc.
# About a minute on two cores, once. Prints the server binary's path.
# VALKEY_SERVER_BIN, when set to an existing binary, is printed instead.
set -euo pipefail

version="8.1.1"
tarball="valkey_${version}+dfsg1.orig.tar.xz"
sha256="d9bbd82eecb82f359e649a0007ad3dc1b47cc15afa626348ca86b73c4ae2c7ee"
urls=(
  "https://deb.debian.org/debian/pool/main/v/valkey/$tarball"
  # snapshot.debian.org keeps every file Debian ever shipped, by its SHA-1.
  "https://snapshot.debian.org/file/40f52feab50d74dc579abf6702429bbd080dce39"
)
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/.local/valkey/$version"
bin="$dir/bin/valkey-server"

if [ -n "${VALKEY_SERVER_BIN:-}" ] && [ -x "$VALKEY_SERVER_BIN" ]; then
  echo "$VALKEY_SERVER_BIN"
  exit 0
fi
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
for tool in curl xz make cc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install-valkey: $tool is needed (make deps installs it)" >&2; exit 1; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
got=
for url in "${urls[@]}"; do
  if curl -fsSL --retry 2 -m 300 -o "$work/$tarball" "$url"; then
    got=1
    break
  fi
done
if [ -z "$got" ]; then
  echo "install-valkey: could not download $tarball from ${urls[*]}" >&2
  exit 1
fi
if ! echo "$sha256  $work/$tarball" | sha256sum -c --quiet - >&2; then
  echo "install-valkey: $tarball does not have the SHA-256 pinned in $0" >&2
  exit 1
fi
echo "building valkey-server $version into $dir (about a minute) ..." >&2
tar -xJf "$work/$tarball" -C "$work"
src="$work/valkey-$version"
if ! make -C "$src" -j"$(nproc)" MALLOC=libc BUILD_TLS=no USE_SYSTEMD=no valkey-server >"$work/build.log" 2>&1; then
  tail -n 40 "$work/build.log" >&2
  echo "install-valkey: the build failed (its log's end is above)" >&2
  exit 1
fi
mkdir -p "$dir/bin"
install -m 0755 "$src/src/valkey-server" "$bin.tmp"
mv "$bin.tmp" "$bin"
# As root, tests may run the server as another user: let every user run it.
chmod -R a+rX "$root/.local/valkey"
echo "$bin"
