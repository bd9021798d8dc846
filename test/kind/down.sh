#!/usr/bin/env bash
# Deletes what test/kind/up.sh created: both kind clusters (with the broker
# and mcsd in them) and the generated files. The image stays in Docker.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require kind
for c in "$C1" "$C2"; do
  if kind get clusters 2>/dev/null | grep -qx "$c"; then
    log "Deleting kind cluster $c"
    kind delete cluster --name "$c"
  fi
done
rm -rf "$KIND_WORK"
