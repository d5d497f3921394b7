#!/usr/bin/env bash
# Installs what the tests need and this machine lacks: redis-server and
# redis-cli (Debian packages redis-server, redis-tools), and each argument
# given as command:package (the Makefile passes curl, openssl, chromium and
# chromedriver). Needs root or sudo; without either it says so, and the
# tests that need them then skip (outside CI) or fail (under CI=true).
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
for pkg in "$@"; do
  command -v "${pkg%%:*}" >/dev/null 2>&1 || missing+=("${pkg##*:}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "test-deps: cannot install ${missing[*]} (not root, no sudo)" >&2; exit 0; fi
fi
echo "test-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
