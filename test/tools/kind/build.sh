#!/usr/bin/env bash
# Builds the pinned kind release into $1/<version>/kind, once, and prints
# that directory (test/tools/modbuild.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../modbuild.sh" "$here" sigs.k8s.io/kind "${1:?usage: build.sh CACHE_DIR}" kind=sigs.k8s.io/kind
