#!/usr/bin/env bash
# Two kind clusters joined by mcsd, on a machine with Docker and kind:
#   - clusters c1 and c2 (a control plane and a worker each) with distinct
#     pod and service ranges, and routes between every pair of their nodes,
#     so that a pod of one reaches pods of the other by their IPs;
#   - the mcsd image built from the Dockerfile and loaded into both;
#   - the broker installed in c1 (which is also a member);
#   - both clusters joined (hack/broker-join.sh) and running mcsd
#     (manifests/mcsd, with their pod CIDRs);
#   - CoreDNS of both forwarding clusterset.local to mcsd.
# Idempotent: run it again to rebuild the image and re-apply. test/kind/e2e.sh
# tests the result; test/kind/down.sh deletes it. SKIP_BUILD=1 uses an IMAGE
# already built.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require docker kind kubectl
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

# A kustomize overlay of manifests/mcsd with this repository's image and the
# cluster's pod CIDR.
write_overlay() {
  local name=$1 pods=$2
  mkdir -p "$KIND_WORK/$name"
  cat >"$KIND_WORK/$name/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../../manifests/mcsd
images:
- name: ghcr.io/mcsd-io/mcsd
  newName: ${IMAGE%:*}
  newTag: ${IMAGE##*:}
patches:
- patch: |-
    apiVersion: apps/v1
    kind: DaemonSet
    metadata:
      name: mcsd-node-agent
      namespace: mcsd-system
    spec:
      template:
        spec:
          containers:
          - name: mcsd
            imagePullPolicy: IfNotPresent
            env:
            - name: POD_CIDRS
              value: "$pods"
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: mcsd-controller
      namespace: mcsd-system
    spec:
      template:
        spec:
          containers:
          - name: mcsd
            imagePullPolicy: IfNotPresent
YAML
}

# CoreDNS forwards clusterset.local to the mcsd-dns Service, with the server
# block of manifests/mcsd/coredns-snippet.yaml.
configure_coredns() {
  local ctx=$1 ip snippet corefile
  ip=$(kubectl --context "$ctx" -n mcsd-system get service mcsd-dns -o jsonpath='{.spec.clusterIP}')
  corefile=$(kubectl --context "$ctx" -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}')
  if grep -q '^clusterset\.local[: ]' <<<"$corefile"; then
    log "CoreDNS of $ctx already forwards clusterset.local"
    return
  fi
  log "CoreDNS of $ctx: forwarding clusterset.local to $ip"
  kubectl --context "$ctx" apply -f "$KIND_ROOT/manifests/mcsd/coredns-snippet.yaml" >/dev/null
  snippet=$(kubectl --context "$ctx" -n mcsd-system get configmap mcsd-coredns-snippet \
    -o jsonpath='{.data.clusterset\.server}')
  printf '%s\n%s\n' "$corefile" "${snippet//MCSD_DNS_CLUSTER_IP/$ip}" >"$KIND_WORK/$ctx.Corefile"
  kubectl --context "$ctx" -n kube-system create configmap coredns \
    --from-file=Corefile="$KIND_WORK/$ctx.Corefile" --dry-run=client -o yaml |
    kubectl --context "$ctx" replace -f -
  kubectl --context "$ctx" -n kube-system rollout restart deployment coredns
  kubectl --context "$ctx" -n kube-system rollout status deployment coredns --timeout=3m
}

create_cluster "$C1" "$POD_CIDR1" "$SVC_CIDR1"
create_cluster "$C2" "$POD_CIDR2" "$SVC_CIDR2"
install_cni "$C1"
install_cni "$C2"

if [[ -z "${SKIP_BUILD:-}" ]]; then
  log "Building $IMAGE"
  docker build -t "$IMAGE" "$KIND_ROOT"
fi
for c in "$C1" "$C2"; do
  kind load docker-image "$IMAGE" --name "$c"
done

add_routes "$C1" "$C2"
add_routes "$C2" "$C1"

log "Installing the broker in $C1"
kubectl --context "$CTX1" apply -k "$KIND_ROOT/manifests/broker"
kubectl --context "$CTX1" wait --for=condition=Established --timeout=60s \
  crd/serviceexports.multicluster.x-k8s.io crd/serviceimports.multicluster.x-k8s.io \
  crd/clusterproperties.about.k8s.io

# Members reach the broker's API server on the kind docker network.
broker_server="https://${C1}-control-plane:6443"
# Each member is declared with its kind pod subnet: the broker refuses its
# endpoints outside it.
join() {
  local c=$1 pods=$2
  log "Joining $c (pods $pods)"
  "$KIND_ROOT/hack/broker-join.sh" --broker-context "$CTX1" --member-context "kind-$c" \
    --pod-cidrs "$pods" --broker-server "$broker_server" --broker-kubeconfig-file "$KIND_WORK/$c.broker.kubeconfig"
}
join "$C1" "$POD_CIDR1"
join "$C2" "$POD_CIDR2"

write_overlay "$C1" "$POD_CIDR1"
write_overlay "$C2" "$POD_CIDR2"
for c in "$C1" "$C2"; do
  log "Installing mcsd in $c"
  # The CRDs first, from their own kustomization (the broker's cluster
  # has them already; applying them again changes nothing).
  kubectl --context "kind-$c" apply -k "$KIND_ROOT/manifests/crds"
  kubectl --context "kind-$c" apply -k "$KIND_WORK/$c"
  # A new image under the same tag: restart to pick it up.
  kubectl --context "kind-$c" -n mcsd-system rollout restart daemonset mcsd-node-agent deployment mcsd-controller
  kubectl --context "kind-$c" -n mcsd-system rollout status daemonset mcsd-node-agent --timeout=3m
  kubectl --context "kind-$c" -n mcsd-system rollout status deployment mcsd-controller --timeout=3m
  configure_coredns "kind-$c"
done

log "Ready: contexts $CTX1 (broker and member) and $CTX2; run test/kind/e2e.sh"
