#!/usr/bin/env bash
# Builds the pinned kind release (the version is read from go.mod, so the
# cache key cannot drift) into $1/<version>/kind, unless it is already
# there, and prints that directory. Static (CGO_ENABLED=0), as kind's own
# releases are.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build.sh CACHE_DIR}
# Absolute: the build below runs from this script's directory.
cache=$(realpath -m "$cache")

version=$(awk '$1 == "require" && $2 == "sigs.k8s.io/kind" {print $3}' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: no sigs.k8s.io/kind version in $here/go.mod" >&2; exit 1; }
out="$cache/$version"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

if [ ! -x "$out/kind" ]; then
  echo "building kind $version into $out (first time only)" >&2
  start=$(date +%s)
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/kind.tmp" sigs.k8s.io/kind)
  mv "$out/kind.tmp" "$out/kind"
  echo "built kind in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
