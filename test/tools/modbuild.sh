#!/usr/bin/env bash
# Builds programs of one module pinned in test/tools: reads MODULE's
# version from DIR/go.mod (so the cache key cannot drift), builds each
# NAME=PACKAGE static (CGO_ENABLED=0), as the projects' own releases are,
# into CACHE/<version>/NAME unless it is already there, and prints that
# directory. STAMP, if set, is more -ldflags, with @VERSION@ standing for
# the version.
#   modbuild.sh DIR MODULE CACHE NAME=PACKAGE...
set -euo pipefail

dir=$(cd "${1:?usage: modbuild.sh DIR MODULE CACHE NAME=PACKAGE...}" && pwd)
module=${2:?usage: modbuild.sh DIR MODULE CACHE NAME=PACKAGE...}
# Absolute: the builds below run from DIR.
cache=$(realpath -m "${3:?usage: modbuild.sh DIR MODULE CACHE NAME=PACKAGE...}")
shift 3

version=$(awk -v m="$module" '$1 == "require" && $2 == m {print $3}' "$dir/go.mod")
[ -n "$version" ] || { echo "modbuild.sh: no $module version in $dir/go.mod" >&2; exit 1; }
out="$cache/$version"
mkdir -p "$out"
# Test binaries of several packages may ask at once: build once, under a lock.
exec 9>"$out/.lock"
flock 9

stamp=${STAMP:-}
stamp=${stamp//@VERSION@/$version}
for target in "$@"; do
  name=${target%%=*} pkg=${target#*=}
  if [ -x "$out/$name" ]; then
    continue
  fi
  echo "building $name $version into $out (first time only)" >&2
  start=$(date +%s)
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $stamp" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  echo "built $name in $(( $(date +%s) - start ))s" >&2
done
echo "$out"
