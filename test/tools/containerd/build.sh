#!/usr/bin/env bash
# Builds the pinned containerd release (the version is read from go.mod, so
# the cache key cannot drift) into $1/<version>/: containerd, its runc shim
# and ctr, skipping any binary that is already there. Static (CGO_ENABLED=0),
# so it runs on any Linux the harness runs on.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build.sh CACHE_DIR}
# Absolute: the builds below run from this script's directory.
cache=$(realpath -m "$cache")

version=$(awk '$1 == "require" && $2 == "github.com/containerd/containerd/v2" {print $3}' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: no github.com/containerd/containerd/v2 version in $here/go.mod" >&2; exit 1; }
out="$cache/$version"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

for c in containerd containerd-shim-runc-v2 ctr; do
  if [ -x "$out/$c" ]; then
    continue
  fi
  echo "building $c $version into $out (first time only; a few minutes)" >&2
  start=$(date +%s)
  (cd "$here" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$version" \
    -o "$out/$c.tmp" "github.com/containerd/containerd/v2/cmd/$c")
  mv "$out/$c.tmp" "$out/$c"
  echo "built $c in $(( $(date +%s) - start ))s" >&2
done
echo "$out"
