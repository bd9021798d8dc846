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
# An archive holding IMAGE (make image writes bin/mcsd-image.tar), loaded
# with kind load image-archive; empty: IMAGE is built with docker build.
IMAGE_ARCHIVE=${IMAGE_ARCHIVE:-}
# kind node image (empty: kind's default).
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
# Worker nodes of each cluster, beside its control plane.
KIND_WORKERS=${KIND_WORKERS:-1}
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

# create_cluster NAME PODS SERVICES: a kind cluster without kind's CNI
# (install_cni gives it one), whose kubelets run on cgroup v1 hosts too
# (kubelet v1.36 refuses cgroup v1 unless failCgroupV1 is false).
create_cluster() {
  local name=$1 pods=$2 services=$3 i
  if kind get clusters 2>/dev/null | grep -qx "$name"; then
    log "kind cluster $name exists"
    return
  fi
  log "Creating kind cluster $name (pods $pods, services $services)"
  mkdir -p "$KIND_WORK"
  {
    cat <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
  podSubnet: "$pods"
  serviceSubnet: "$services"
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
nodes:
- role: control-plane
YAML
    for ((i = 0; i < KIND_WORKERS; i++)); do
      echo "- role: worker"
    done
  } >"$KIND_WORK/$name.yaml"
  local args=(--name "$name" --config "$KIND_WORK/$name.yaml")
  if [[ -n "$KIND_NODE_IMAGE" ]]; then
    args+=(--image "$KIND_NODE_IMAGE")
  fi
  kind create cluster "${args[@]}"
}

# install_cni NAME: the CNI of cluster NAME, which kind's is not: on every
# node a ptp network with host-local addresses from the node's pod CIDR,
# and a route to every other node's pod CIDR through that node. Then it
# waits until every node is Ready. The plugins are the node's own (kind's
# base image has them in /opt/cni/bin; other node images may have them in
# /usr/lib/cni).
install_cni() {
  local name=$1 ctx="kind-$1" node cidr ip routes
  retry 120 pod_cidrs_assigned "$ctx"
  routes=$(kubectl --context "$ctx" get nodes \
    -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
  log "Installing the CNI of $name"
  while read -r node cidr ip; do
    [[ -n "$node" ]] || continue
    docker exec -i "$node" sh -eu -s "$cidr" <<'SH'
mkdir -p /opt/cni/bin /etc/cni/net.d
for p in /usr/lib/cni/*; do
  if [ -e "$p" ] && [ ! -e "/opt/cni/bin/${p##*/}" ]; then ln -s "$p" /opt/cni/bin/; fi
done
cat >/etc/cni/net.d/10-ptp.conflist <<JSON
{
  "cniVersion": "1.0.0",
  "name": "kind-ptp",
  "plugins": [
    {"type": "ptp", "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$1"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
SH
    while read -r other ocidr oip; do
      [[ -n "$other" && "$other" != "$node" ]] || continue
      docker exec "$node" ip route replace "$ocidr" via "$oip"
    done <<<"$routes"
  done <<<"$routes"
  kubectl --context "$ctx" wait --for=condition=Ready node --all --timeout=5m
}

pod_cidrs_assigned() {
  local ctx=$1
  ! kubectl --context "$ctx" get nodes -o jsonpath='{range .items[*]}{.spec.podCIDR}{"\n"}{end}' | grep -qx ''
}
