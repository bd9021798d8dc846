#!/usr/bin/env bash
# Builds the pinned CoreDNS release (the version is read from go.mod, so the
# cache key cannot drift) into $1/<version>/coredns, once: a second run only
# prints the directory. The binary is static (CGO_ENABLED=0), so that it runs
# alone in a container image (test/lib/images) as well as on the host; a cached
# binary built otherwise is rebuilt.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build.sh CACHE_DIR}
# Absolute: the builds below run from this script's directory.
cache=$(realpath -m "$cache")

version=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3}' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: no github.com/coredns/coredns version in $here/go.mod" >&2; exit 1; }
out="$cache/$version"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

static() { go version -m "$1" 2>/dev/null | grep -q $'^\tbuild\tCGO_ENABLED=0$'; }
if [ ! -x "$out/coredns" ] || ! static "$out/coredns"; then
  echo "building coredns $version into $out (first time only; a few minutes)" >&2
  start=$(date +%s)
  # CoreDNS stamps its own version; GitCommit says which release it is.
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$version" \
    -o "$out/coredns.tmp" github.com/coredns/coredns)
  mv "$out/coredns.tmp" "$out/coredns"
  echo "built coredns in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
