#!/usr/bin/env bash
# Builds the pinned crictl release into $1/<version>/crictl, once, stamped
# with its version, and prints that directory (test/tools/modbuild.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
STAMP="-X sigs.k8s.io/cri-tools/pkg/version.Version=@VERSION@" \
  exec bash "$here/../modbuild.sh" "$here" sigs.k8s.io/cri-tools "${1:?usage: build.sh CACHE_DIR}" crictl=sigs.k8s.io/cri-tools/cmd/crictl
