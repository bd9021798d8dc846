#!/usr/bin/env bash
# Joins a member cluster to the broker: `kubectl mcs join` (cmd/kubectl-mcs), built from this repository; same flags (--broker-context, --member-context, --pod-cidrs, --cluster-id, --broker-server, --broker-namespace, --broker-kubeconfig-file, --no-secret, --install, --image, --dns, --dry-run, -o); see `kubectl-mcs join --help`.
set -euo pipefail; root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
go -C "$root" build -o "$root/bin/kubectl-mcs" ./cmd/kubectl-mcs && exec "$root/bin/kubectl-mcs" join "$@"
