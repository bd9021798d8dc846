#!/usr/bin/env bash
# Two kind clusters joined by mcsd, on a machine with Docker and kind:
#   - clusters c1 and c2 (a control plane and a worker each) with distinct
#     pod and service ranges, and routes between every pair of their nodes,
#     so that a pod of one reaches pods of the other by their IPs;
#   - the mcsd image loaded into both: IMAGE_ARCHIVE (make image) with
#     kind load image-archive, else IMAGE built from the Dockerfile;
#   - the broker installed in c1 (which is also a member) with kubectl mcs
#     broker install;
#   - both clusters joined with kubectl mcs join, which installs mcsd and
#     makes CoreDNS forward clusterset.local to it.
# Idempotent: run it again to re-apply. test/kind/e2e.sh tests the result;
# test/kind/down.sh deletes it. SKIP_BUILD=1 uses an IMAGE already built.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require docker kind kubectl kubectl-mcs
mkdir -p "$KIND_WORK"

# Every node of cluster $1 routes the pod range of every node of cluster $2
# to that node's address on the kind docker network.
add_routes() {
  local from=$1 to=$2 routes node
  routes=$(kubectl --context "kind-$to" get nodes \
    -o jsonpath='{range .items[*]}{.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
  log "Routing pods of $to from the nodes of $from"
  for node in $(kind get nodes --name "$from"); do
    while read -r cidr via; do
      [[ -n "$cidr" && -n "$via" ]] || continue
      docker exec "$node" ip route replace "$cidr" via "$via"
    done <<<"$routes"
  done
}

create_cluster "$C1" "$POD_CIDR1" "$SVC_CIDR1"
create_cluster "$C2" "$POD_CIDR2" "$SVC_CIDR2"
install_cni "$C1"
install_cni "$C2"

if [[ -n "$IMAGE_ARCHIVE" ]]; then
  for c in "$C1" "$C2"; do
    kind load image-archive "$IMAGE_ARCHIVE" --name "$c"
  done
else
  if [[ -z "${SKIP_BUILD:-}" ]]; then
    log "Building $IMAGE"
    docker build -t "$IMAGE" "$KIND_ROOT"
  fi
  for c in "$C1" "$C2"; do
    kind load docker-image "$IMAGE" --name "$c"
  done
fi

add_routes "$C1" "$C2"
add_routes "$C2" "$C1"

log "Installing the broker in $C1"
kubectl mcs broker install --broker-context "$CTX1"

# Members reach the broker's API server at its node's address on the kind
# docker network (in the server's certificate), which needs no DNS. join
# installs mcsd with the image, declares the member's pod CIDRs (its
# nodes'), and makes CoreDNS forward clusterset.local to mcsd.
broker_ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "${C1}-control-plane")
for c in "$C1" "$C2"; do
  log "Joining $c"
  kubectl mcs join --broker-context "$CTX1" --context "kind-$c" --image "$IMAGE" \
    --broker-server "https://${broker_ip}:6443" --timeout 10m
done

log "Ready: contexts $CTX1 (broker and member) and $CTX2; run test/kind/e2e.sh"
