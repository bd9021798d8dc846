# Shared settings of the kind scripts (sourced, not run). Every value can be
# overridden from the environment.
# shellcheck shell=bash disable=SC2034 # settings used by the scripts that source it

KIND_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# Cluster 1 is the broker and a member; cluster 2 is a member.
C1=${C1:-c1}
C2=${C2:-c2}
CTX1="kind-${C1}"
CTX2="kind-${C2}"
# Distinct pod and service ranges, so that pod networks can be routed to
# each other; none overlaps docker's networks or the ClusterSetIP range
# (243.0.0.0/8).
POD_CIDR1=${POD_CIDR1:-10.110.0.0/16}
SVC_CIDR1=${SVC_CIDR1:-10.111.0.0/16}
POD_CIDR2=${POD_CIDR2:-10.120.0.0/16}
SVC_CIDR2=${SVC_CIDR2:-10.121.0.0/16}
# The image built from the Dockerfile and loaded into both clusters. Keep a
# tag other than "latest", so that kubelet does not try to pull it.
IMAGE=${IMAGE:-ghcr.io/mcsd-io/mcsd:dev}
# kind node image (empty: kind's default).
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
# Generated files: kind configs, broker kubeconfigs, kustomize overlays.
# Fixed under the repository, so that overlays reach manifests/mcsd by a
# relative path.
KIND_WORK="${KIND_ROOT}/.cache/kind"

log() { printf '\n==> %s\n' "$*" >&2; }

require() {
  local missing=()
  for cmd in "$@"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "missing commands: ${missing[*]}" >&2
    exit 1
  fi
}

# retry SECONDS CMD...: runs CMD every 2s until it succeeds or SECONDS pass.
retry() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    if ((SECONDS >= deadline)); then
      echo "gave up after retrying: $*" >&2
      return 1
    fi
    sleep 2
  done
}
