package record

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Name is the name of cluster's export record of the Service
// namespace/name in the broker namespace: "<namespace>.<name>.<cluster>",
// so that a listing groups the records of one service together. Cluster
// IDs, namespaces and Service names are RFC 1123 labels (no dots, at most
// 63 characters), which makes the name unique per (cluster, namespace,
// name) and at most 191 characters long. Should a part not be such a label,
// the name is a hashed one instead (see hashedName), still unique and valid.
func Name(cluster, namespace, name string) string {
	return objectName(namespace, name, cluster)
}

// EndpointSliceName is the name of the index-th broker EndpointSlice that
// holds cluster's endpoints of the Service namespace/name in one address
// family: "<namespace>.<name>.<cluster>.<family>-<index>", for example
// "shop.cart.east.ipv4-0". A cluster writes at least one slice per address
// family of its Service; index counts from 0 when it needs more.
func EndpointSliceName(cluster, namespace, name string, family discoveryv1.AddressType, index int) string {
	return objectName(namespace, name, cluster, strings.ToLower(string(family))+"-"+strconv.Itoa(max(index, 0)))
}

// MaxEndpointsPerSlice is the most endpoints a cluster writes in one
// broker EndpointSlice (the core EndpointSlice controller's default too):
// the broker's budget of endpoints per slice is at least this.
const MaxEndpointsPerSlice = 100

// LeaseName is the name of cluster's heartbeat Lease in the broker
// namespace: "cluster-<cluster>", the same name as the cluster's broker
// ServiceAccount.
func LeaseName(cluster string) string {
	if errs := validation.IsDNS1123Label(cluster); len(errs) == 0 {
		return "cluster-" + cluster
	}
	return hashedName("cluster", cluster)
}

// objectName joins parts with dots when each is an RFC 1123 label and the
// result fits a DNS subdomain, and hashes them otherwise.
func objectName(parts ...string) string {
	for _, p := range parts {
		if errs := validation.IsDNS1123Label(p); len(errs) > 0 {
			return hashedName(parts...)
		}
	}
	n := strings.Join(parts, ".")
	if len(n) > validation.DNS1123SubdomainMaxLength {
		return hashedName(parts...)
	}
	return n
}

// hashedName is a readable prefix of parts (lower-case letters, digits and
// dashes, at most 150 characters) and 40 hex digits of the SHA-256 of the
// parts. It has no dots, so it never equals a joined name of several
// labels.
func hashedName(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	hash := hex.EncodeToString(sum[:])[:40]
	var b strings.Builder
	for _, r := range strings.ToLower(strings.Join(parts, "-")) {
		if b.Len() >= 150 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	prefix := strings.Trim(b.String(), "-")
	if prefix == "" {
		return hash
	}
	return prefix + "-" + hash
}
