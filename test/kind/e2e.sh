#!/usr/bin/env bash
# Tests the clusters of test/kind/up.sh:
#   1. a smoke test with kubectl: an echo app in c2, exported; from a pod in
#      c1, its clusterset name resolves and answers with a c2 pod's name;
#   2. the upstream mcs-api conformance suite (MCS_API_REF, a tag of
#      kubernetes-sigs/mcs-api) against both clusters; its report.html is
#      copied to .cache/kind/.
# SKIP_SMOKE=1 or SKIP_CONFORMANCE=1 skip a part; CONFORMANCE_ARGS are more
# arguments for the suite (such as -ginkgo.focus=...).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The mcs-api release whose CRDs manifests/crds holds (go.mod).
MCS_API_REF=${MCS_API_REF:-v0.5.2}
AGNHOST=${AGNHOST:-registry.k8s.io/e2e-test-images/agnhost:2.53}
BUSYBOX=${BUSYBOX:-busybox:1.36}
NS=mcsd-smoke

require kubectl git go
mkdir -p "$KIND_WORK"

k1() { kubectl --context "$CTX1" "$@"; }
k2() { kubectl --context "$CTX2" "$@"; }

serviceexport_ready() {
  [[ $(k2 -n "$NS" get serviceexport echo \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

serviceimport_has_ip() {
  [[ -n $(k1 -n "$NS" get serviceimport echo -o jsonpath='{.spec.ips[0]}' 2>/dev/null) ]]
}

resolves() {
  k1 -n "$NS" exec client -- nslookup "echo.${NS}.svc.clusterset.local" >"$KIND_WORK/nslookup.out" 2>&1
}

# The echo app answers /hostname with its pod's name: one of c2's pods.
answers_from_c2() {
  local name
  name=$(k1 -n "$NS" exec client -- wget -qO- -T 5 "http://echo.${NS}.svc.clusterset.local:8080/hostname" 2>/dev/null) || return 1
  k2 -n "$NS" get pod "$name" >/dev/null 2>&1 || return 1
  echo "answered by $name in $C2"
}

dump() {
  echo "--- state after failure" >&2
  k2 -n "$NS" get serviceexport echo -o yaml >&2 || true
  k1 -n "$NS" get serviceimport,endpointslices -o wide >&2 || true
  cat "$KIND_WORK/nslookup.out" >&2 2>/dev/null || true
  for ctx in "$CTX1" "$CTX2"; do
    kubectl --context "$ctx" -n mcsd-system logs deployment/mcsd-controller --tail=50 >&2 || true
    kubectl --context "$ctx" -n mcsd-system logs daemonset/mcsd-node-agent --tail=50 >&2 || true
  done
}

smoke() {
  log "Smoke: export echo from $C2, reach it by name from $C1"
  trap dump ERR
  # A service is imported where its namespace exists.
  for ctx in "$CTX1" "$CTX2"; do
    kubectl --context "$ctx" create namespace "$NS" --dry-run=client -o yaml | kubectl --context "$ctx" apply -f -
  done
  k2 -n "$NS" create deployment echo --image="$AGNHOST" --replicas=2 --dry-run=client -o yaml \
    -- /agnhost netexec --http-port=8080 | k2 apply -f -
  k2 -n "$NS" expose deployment echo --port=8080 --dry-run=client -o yaml | k2 apply -f -
  k2 -n "$NS" apply -f - <<YAML
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata:
  name: echo
  namespace: ${NS}
YAML
  k2 -n "$NS" rollout status deployment echo --timeout=3m
  retry 120 serviceexport_ready
  retry 120 serviceimport_has_ip
  k1 -n "$NS" get serviceimport echo -o wide

  k1 -n "$NS" run client --image="$BUSYBOX" --restart=Never --dry-run=client -o yaml \
    -- sleep 3600 | k1 apply -f -
  k1 -n "$NS" wait --for=condition=Ready pod/client --timeout=3m
  retry 120 resolves
  cat "$KIND_WORK/nslookup.out"
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
