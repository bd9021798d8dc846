package record

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
)

// Where objects live on the broker. Each member writes its export records,
// EndpointSlices and heartbeat Lease only in its own member namespace, so
// that a ResourceQuota there bounds what that member alone may store; what
// every member must read as a whole (ClusterSetIP block claims, member
// declarations, the settings and export rules) stays in the broker
// namespace. Readers list across every namespace by label and keep an
// object only where its source-cluster label says it must be (InMember).

// MemberNamespace is the namespace of the broker whose namespace is
// brokerNamespace in which cluster writes: "<brokerNamespace>-<cluster>"
// (mcsd-broker-east) when that is a namespace name, else a prefix of it and
// a hash of both, still unique per broker and cluster.
func MemberNamespace(brokerNamespace, cluster string) string {
	n := brokerNamespace + "-" + cluster
	if len(validation.IsDNS1123Label(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(brokerNamespace + "\x00" + cluster))
	prefix := strings.Trim(sanitize(n), "-")
	if len(prefix) > validation.DNS1123LabelMaxLength-17 {
		prefix = strings.TrimRight(prefix[:validation.DNS1123LabelMaxLength-17], "-")
	}
	return prefix + "-" + hex.EncodeToString(sum[:])[:16]
}

// sanitize keeps lower-case letters and digits and turns everything else
// into dashes.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

// InMember reports whether obj, a broker object labelled with the cluster
// that wrote it, lies in that cluster's member namespace of the broker
// brokerNamespace. The broker's admission lets a member write only there
// and only under its own label, so an object elsewhere was written by
// someone else (another broker sharing the API server, a workload of the
// broker cluster, an importer copying exported labels) and counts for
// nothing.
func InMember(brokerNamespace string, obj any) bool {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	cluster := m.GetLabels()[LabelSourceCluster]
	return cluster != "" && m.GetNamespace() == MemberNamespace(brokerNamespace, cluster)
}

// OnlyMembers wraps an informer transform (next may be nil) of a reader
// that lists broker objects across every namespace: an object outside its
// cluster's member namespace (see InMember) loses its labels before next
// sees it, so that no index, selector, count or decoding keyed by them
// finds anything in it (an export record of no cluster is invalid).
// Informers cannot drop an object, but they can make it anonymous.
func OnlyMembers(brokerNamespace string, next cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		if !InMember(brokerNamespace, obj) {
			if m, err := meta.Accessor(obj); err == nil {
				m.SetLabels(nil)
			}
		}
		if next == nil {
			return obj, nil
		}
		return next(obj)
	}
}
