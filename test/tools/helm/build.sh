#!/usr/bin/env bash
# Builds helm at the version the repository's go.mod requires (the module
# whose engine package charts renders with, so the CLI and the rendering
# cannot drift) into $1/<version>/helm, once: a second run only prints the
# directory. helm is built in its own module graph (go install
# module@version), as a user's `go install` would.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build.sh CACHE_DIR}
cache=$(realpath -m "$cache")

version=$(awk '$1 == "helm.sh/helm/v4" {print $2}' "$here/../../../go.mod")
[ -n "$version" ] || { echo "build.sh: no helm.sh/helm/v4 version in go.mod" >&2; exit 1; }
out="$cache/$version"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

if [ ! -x "$out/helm" ]; then
  echo "building helm $version into $out (first time only; minutes)" >&2
  start=$(date +%s)
  tmp=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # From outside any module: module@version builds with helm's go.mod.
  (cd "$tmp" && GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS='' go install "helm.sh/helm/v4/cmd/helm@$version")
  mv "$tmp/helm" "$out/helm"
  echo "built helm in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
