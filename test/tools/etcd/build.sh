#!/usr/bin/env bash
# Builds the pinned etcd release into $1/<version>/etcd, once, and prints
# that directory (test/tools/modbuild.sh). etcd's version is a constant of
# its api module: nothing to stamp.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../modbuild.sh" "$here" go.etcd.io/etcd/server/v3 "${1:?usage: build.sh CACHE_DIR}" etcd=go.etcd.io/etcd/server/v3
