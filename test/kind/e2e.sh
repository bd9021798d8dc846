#!/usr/bin/env bash
# Tests the clusters of test/kind/up.sh:
#   1. a smoke test with kubectl: an echo app in c2, exported; from a pod in
#      c1, its clusterset name resolves and answers with a c2 pod's name;
#   2. the upstream mcs-api conformance suite (MCS_API_REF, a tag of
#      kubernetes-sigs/mcs-api, cloned from GitHub; its pods pull their
#      images from registries) against both clusters; its report.html is
#      copied to .cache/kind/.
# The smoke test needs no registry: its echo server is the image that
# `go run ./test/cmd/images -only echo` builds (ECHO_IMAGE and ECHO_ARCHIVE name another
# one), loaded with kind load image-archive, and its client is the mcsd
# image (IMAGE) that up.sh loaded.
# SKIP_SMOKE=1 or SKIP_CONFORMANCE=1 skip a part; CONFORMANCE_ARGS are more
# arguments for the suite (such as -ginkgo.focus=...).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The mcs-api release whose CRDs manifests/crds holds (go.mod).
MCS_API_REF=${MCS_API_REF:-v0.5.2}
ECHO_IMAGE=${ECHO_IMAGE:-}
ECHO_ARCHIVE=${ECHO_ARCHIVE:-}
NS=mcsd-smoke

require kubectl kind go
mkdir -p "$KIND_WORK"

k1() { kubectl --context "$CTX1" "$@"; }
k2() { kubectl --context "$CTX2" "$@"; }

# echo_image sets ECHO_IMAGE and ECHO_ARCHIVE to the echo server's image,
# building it when none is given: test/cmd/images prints
# "REF SIZE MiB SECONDS PATH".
echo_image() {
  if [[ -n "$ECHO_IMAGE" && -n "$ECHO_ARCHIVE" ]]; then
    return
  fi
  local line
  line=$(cd "$KIND_ROOT" && go run ./test/cmd/images -only echo)
  ECHO_IMAGE=$(awk '{print $1}' <<<"$line")
  ECHO_ARCHIVE=$(awk '{print $NF}' <<<"$line")
}

serviceexport_ready() {
  [[ $(k2 -n "$NS" get serviceexport echo \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

serviceimport_has_ip() {
  [[ -n $(k1 -n "$NS" get serviceimport echo -o jsonpath='{.spec.ips[0]}' 2>/dev/null) ]]
}

resolves() {
  k1 -n "$NS" exec client -- getent hosts "echo.${NS}.svc.clusterset.local" >"$KIND_WORK/resolve.out" 2>&1
}

# The echo server writes "<ip> <cluster> <pod>" on each connection: the pod
# must be one of c2's.
answers_from_c2() {
  local reply pod
  reply=$(k1 -n "$NS" exec client -- timeout 5 \
    bash -c "exec 3<>/dev/tcp/echo.${NS}.svc.clusterset.local/8080 && head -n 1 <&3" 2>/dev/null) || return 1
  pod=$(awk '{print $3}' <<<"$reply")
  [[ -n "$pod" ]] && k2 -n "$NS" get pod "$pod" >/dev/null 2>&1 || return 1
  echo "answered \"$reply\": pod $pod of $C2"
}

dump() {
  echo "--- state after failure" >&2
  k2 -n "$NS" get serviceexport echo -o yaml >&2 || true
  k1 -n "$NS" get serviceimport,endpointslices -o wide >&2 || true
  cat "$KIND_WORK/resolve.out" >&2 2>/dev/null || true
  for ctx in "$CTX1" "$CTX2"; do
    kubectl --context "$ctx" -n mcsd-system logs deployment/mcsd-controller --tail=50 >&2 || true
    kubectl --context "$ctx" -n mcsd-system logs daemonset/mcsd-node-agent --tail=50 >&2 || true
  done
}

smoke() {
  log "Smoke: export echo from $C2, reach it by name from $C1"
  trap dump ERR
  echo_image
  kind load image-archive "$ECHO_ARCHIVE" --name "$C2"
  # A service is imported where its namespace exists.
  for ctx in "$CTX1" "$CTX2"; do
    kubectl --context "$ctx" create namespace "$NS" --dry-run=client -o yaml | kubectl --context "$ctx" apply -f -
  done
  k2 -n "$NS" apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      containers:
      - name: echo
        image: ${ECHO_IMAGE}
        imagePullPolicy: Never
        env:
        - {name: CLUSTER, value: "${C2}"}
        - name: POD_IPS
          valueFrom: {fieldRef: {fieldPath: status.podIPs}}
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        readinessProbe:
          tcpSocket: {port: 8080}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports: [{port: 8080}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: echo}
YAML
  k2 -n "$NS" rollout status deployment echo --timeout=3m
  retry 120 serviceexport_ready
  retry 120 serviceimport_has_ip
  k1 -n "$NS" get serviceimport echo -o wide

  k1 -n "$NS" run client --image="$IMAGE" --image-pull-policy=Never --restart=Never \
    --dry-run=client -o yaml --command -- sleep infinity | k1 apply -f -
  k1 -n "$NS" wait --for=condition=Ready pod/client --timeout=3m
  retry 120 resolves
  cat "$KIND_WORK/resolve.out"
  retry 120 answers_from_c2
  trap - ERR

  for ctx in "$CTX1" "$CTX2"; do
    kubectl --context "$ctx" delete namespace "$NS" --wait=false
  done
  log "Smoke test passed"
}

conformance() {
  local src="$KIND_WORK/mcs-api"
  log "mcs-api conformance ($MCS_API_REF) against $CTX1,$CTX2"
  if [[ ! -d "$src/.git" ]]; then
    git clone --quiet https://github.com/kubernetes-sigs/mcs-api "$src"
  fi
  git -C "$src" fetch --quiet --tags origin
  git -C "$src" checkout --quiet "$MCS_API_REF"
  local rc=0
  # shellcheck disable=SC2086 # CONFORMANCE_ARGS is a list of arguments
  (cd "$src/conformance" && go test -v -timeout 60m ./... -args \
    --contexts="$CTX1,$CTX2" ${CONFORMANCE_ARGS:-}) || rc=$?
  if [[ -f "$src/conformance/report.html" ]]; then
    cp "$src/conformance/report.html" "$KIND_WORK/conformance-report.html"
    log "Conformance report: $KIND_WORK/conformance-report.html"
  fi
  return "$rc"
}

if [[ -z "${SKIP_SMOKE:-}" ]]; then
  smoke
fi
if [[ -z "${SKIP_CONFORMANCE:-}" ]]; then
  conformance
fi
