#!/usr/bin/env bash
# Declares a member cluster on the broker, creates its identity there and
# hands it to the member, with kubectl only (what broker.AddMember does in
# Go):
#
#   on the broker   the declaration ConfigMap mcsd-member-<id> holding the
#                   member's pod CIDRs (--pod-cidrs: the broker refuses the
#                   member's endpoints outside them); ServiceAccount
#                   cluster-<id> and RoleBinding mcsd-member-<id> to the Role
#                   mcsd-member, both owned by the declaration (deleting it
#                   removes the member); a token Secret cluster-<id>-token
#                   (filled by the token controller); the ResourceQuota
#                   mcsd-broker raised to one member budget per member;
#   locally         a kubeconfig of that identity (--output);
#   on the member   the Secret mcsd-system/mcsd-broker holding it under the
#                   key "kubeconfig", which mcsd reads (--broker-secret).
#
# The broker must have been installed first (kubectl apply -k manifests/broker).
#
#   hack/broker-join.sh --broker-context BROKER --member-context MEMBER \
#       --pod-cidrs CIDR[,CIDR] [--cluster-id ID] [--broker-server URL] \
#       [--broker-namespace NS] [--output FILE] [--no-secret]
#
# The cluster ID is, in order: --cluster-id; the member's ClusterProperty
# cluster.clusterset.k8s.io; the UID of the member's kube-system namespace.
# The last two are what mcsd itself resolves without --cluster-id, so both
# sides agree; pass the same --cluster-id to mcsd if you give one here.
# --pod-cidrs are the member's pod CIDRs, comma-separated (its
# kube-controller-manager's --cluster-cidr; kind's networking.podSubnet).
# --broker-server is the broker API server's URL as the member's nodes reach
# it (default: the server of --broker-context).
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit "${1:-0}"
}

broker_ctx=""
member_ctx=""
cluster_id=""
pod_cidrs=""
broker_server=""
broker_ns="mcsd-broker"
output=""
secret=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --broker-context) broker_ctx="$2"; shift 2 ;;
    --member-context) member_ctx="$2"; shift 2 ;;
    --cluster-id) cluster_id="$2"; shift 2 ;;
    --pod-cidrs) pod_cidrs="$2"; shift 2 ;;
    --broker-server) broker_server="$2"; shift 2 ;;
    --broker-namespace) broker_ns="$2"; shift 2 ;;
    --output) output="$2"; shift 2 ;;
    --no-secret) secret=0; shift ;;
    -h | --help) usage 0 ;;
    *) echo "broker-join: unknown argument $1" >&2; usage 2 >&2 ;;
  esac
done
if [[ -z "$broker_ctx" || -z "$member_ctx" || -z "$pod_cidrs" ]]; then
  echo "broker-join: --broker-context, --member-context and --pod-cidrs are required" >&2
  usage 2 >&2
fi
pod_cidrs=${pod_cidrs// /}
IFS=, read -r -a cidr_list <<<"$pod_cidrs"
for cidr in "${cidr_list[@]}"; do
  if [[ ! "$cidr" =~ ^[0-9a-fA-F.:]+/[0-9]{1,3}$ ]]; then
    echo "broker-join: pod CIDR \"$cidr\" is not a CIDR" >&2
    exit 2
  fi
done

kb() { kubectl --context "$broker_ctx" "$@"; }
km() { kubectl --context "$member_ctx" "$@"; }

if [[ -z "$cluster_id" ]]; then
  cluster_id=$(km get clusterproperties.about.k8s.io cluster.clusterset.k8s.io \
    -o jsonpath='{.spec.value}' 2>/dev/null || true)
fi
if [[ -z "$cluster_id" ]]; then
  cluster_id=$(km get namespace kube-system -o jsonpath='{.metadata.uid}')
fi
if [[ ! "$cluster_id" =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]]; then
  echo "broker-join: cluster ID \"$cluster_id\" is not an RFC 1123 label; pass --cluster-id" >&2
  exit 1
fi
account="cluster-${cluster_id}"
token_secret="${account}-token"
output="${output:-${account}.broker.kubeconfig}"
if [[ -z "$broker_server" ]]; then
  broker_server=$(kubectl config view --minify --raw --context "$broker_ctx" \
    -o jsonpath='{.clusters[0].cluster.server}')
fi

echo "broker-join: cluster ${cluster_id} (pods ${pod_cidrs}) joins the broker of context ${broker_ctx} (${broker_server}) as ${broker_ns}/${account}"
kb get namespace "$broker_ns" >/dev/null
kb -n "$broker_ns" get role mcsd-member >/dev/null
if ! kb -n "$broker_ns" get configmap/mcsd-broker-settings resourcequota/mcsd-broker >/dev/null; then
  echo "broker-join: the broker has no settings or quota in ${broker_ns}: apply manifests/broker (of this version) first" >&2
  exit 1
fi
declaration="mcsd-member-${cluster_id}"
kb apply -f - <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: ${declaration}
  namespace: ${broker_ns}
  labels:
    app.kubernetes.io/name: mcsd
    mcsd.io/member-declaration: ""
    multicluster.kubernetes.io/source-cluster: "${cluster_id}"
data:
  podCIDRs: "${pod_cidrs}"
YAML
declaration_uid=$(kb -n "$broker_ns" get configmap "$declaration" -o jsonpath='{.metadata.uid}')
kb apply -f - <<YAML
apiVersion: v1
kind: ServiceAccount
metadata:
  name: ${account}
  namespace: ${broker_ns}
  labels:
    app.kubernetes.io/name: mcsd
    mcsd.io/member-cluster: "${cluster_id}"
  ownerReferences:
  - apiVersion: v1
    kind: ConfigMap
    name: ${declaration}
    uid: ${declaration_uid}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: mcsd-member-${cluster_id}
  namespace: ${broker_ns}
  labels:
    app.kubernetes.io/name: mcsd
    mcsd.io/member-cluster: "${cluster_id}"
  ownerReferences:
  - apiVersion: v1
    kind: ConfigMap
    name: ${declaration}
    uid: ${declaration_uid}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: mcsd-member
subjects:
- kind: ServiceAccount
  name: ${account}
  namespace: ${broker_ns}
---
apiVersion: v1
kind: Secret
metadata:
  name: ${token_secret}
  namespace: ${broker_ns}
  labels:
    app.kubernetes.io/name: mcsd
    mcsd.io/member-cluster: "${cluster_id}"
  annotations:
    kubernetes.io/service-account.name: ${account}
type: kubernetes.io/service-account-token
YAML

# One member budget per member and a spare one, as broker.AddMember does.
budget() {
  kb -n "$broker_ns" get configmap mcsd-broker-settings -o "jsonpath={.data.$1}"
}
members=$(kb -n "$broker_ns" get serviceaccounts -l mcsd.io/member-cluster -o name | wc -l)
n=$((members + 1))
kb -n "$broker_ns" patch resourcequota mcsd-broker --type merge -p "$(cat <<JSON
{"spec": {"hard": {
  "count/serviceimports.multicluster.x-k8s.io": "$((n * $(budget memberServiceImports)))",
  "count/endpointslices.discovery.k8s.io": "$((n * $(budget memberEndpointSlices)))",
  "count/configmaps": "$((n * $(budget memberConfigMaps) + 2))",
  "count/leases.coordination.k8s.io": "$((n * $(budget memberLeases)))"
}}}
JSON
)" >/dev/null

# The token controller of the broker's kube-controller-manager fills it.
token=""
for _ in $(seq 1 60); do
  token=$(kb -n "$broker_ns" get secret "$token_secret" -o jsonpath='{.data.token}')
  [[ -n "$token" ]] && break
  sleep 1
done
if [[ -z "$token" ]]; then
  echo "broker-join: Secret ${broker_ns}/${token_secret} has no token after 60s (is the broker's kube-controller-manager running?)" >&2
  exit 1
fi
token=$(printf '%s' "$token" | base64 -d)

workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT
kb -n "$broker_ns" get secret "$token_secret" -o jsonpath='{.data.ca\.crt}' | base64 -d >"$workdir/ca.crt"
(
  umask 077
  kubeconfig="$workdir/kubeconfig"
  kubectl config --kubeconfig "$kubeconfig" set-cluster broker --server "$broker_server" \
    --certificate-authority "$workdir/ca.crt" --embed-certs=true >/dev/null
  kubectl config --kubeconfig "$kubeconfig" set-credentials "$account" --token "$token" >/dev/null
  kubectl config --kubeconfig "$kubeconfig" set-context broker --cluster broker --user "$account" \
    --namespace "$broker_ns" >/dev/null
  kubectl config --kubeconfig "$kubeconfig" use-context broker >/dev/null
  cp "$kubeconfig" "$output"
)
echo "broker-join: wrote ${output}"

if [[ "$secret" == 1 ]]; then
  km create namespace mcsd-system --dry-run=client -o yaml | km apply -f - >/dev/null
  km -n mcsd-system create secret generic mcsd-broker --from-file=kubeconfig="$output" \
    --dry-run=client -o yaml | km apply -f - >/dev/null
  echo "broker-join: Secret mcsd-system/mcsd-broker is in context ${member_ctx}"
fi
