#!/usr/bin/env bash
# Builds the pinned crictl release (the version is read from go.mod, so the
# cache key cannot drift) into $1/<version>/crictl, unless it is already
# there, and prints that directory. Static (CGO_ENABLED=0), as cri-tools'
# own releases are.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build.sh CACHE_DIR}
# Absolute: the build below runs from this script's directory.
cache=$(realpath -m "$cache")

version=$(awk '$1 == "require" && $2 == "sigs.k8s.io/cri-tools" {print $3}' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: no sigs.k8s.io/cri-tools version in $here/go.mod" >&2; exit 1; }
out="$cache/$version"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

if [ ! -x "$out/crictl" ]; then
  echo "building crictl $version into $out (first time only)" >&2
  start=$(date +%s)
  (cd "$here" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$version" \
    -o "$out/crictl.tmp" sigs.k8s.io/cri-tools/cmd/crictl)
  mv "$out/crictl.tmp" "$out/crictl"
  echo "built crictl in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
