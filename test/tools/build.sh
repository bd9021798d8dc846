#!/usr/bin/env bash
# Builds the pinned Kubernetes components the test harness runs into
# $1/<version>/, skipping any binary that is already there, so a second run
# costs nothing. The version is read from go.mod so the cache key cannot drift.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build.sh CACHE_DIR [component...]}
# Absolute: the builds below run from this script's directory.
cache=$(realpath -m "$cache")
shift
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(kube-apiserver kube-controller-manager)

version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: no k8s.io/kubernetes version in $here/go.mod" >&2; exit 1; }
minor=${version#v1.}; minor=${minor%%.*}
out="$cache/$version"
mkdir -p "$out"
# Test binaries of several packages may ask at once: build once, under a lock.
exec 9>"$out/.lock"
flock 9

# Unstamped binaries report v0.0.0-master, which clients refuse to parse.
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  stamp+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

for c in "${components[@]}"; do
  if [ -x "$out/$c" ]; then
    continue
  fi
  echo "building $c $version into $out (first time only; several minutes)" >&2
  start=$(date +%s)
  (cd "$here" && go build -trimpath -ldflags "-s -w$stamp" -o "$out/$c.tmp" "k8s.io/kubernetes/cmd/$c")
  mv "$out/$c.tmp" "$out/$c"
  echo "built $c in $(( $(date +%s) - start ))s" >&2
done
echo "$out"
