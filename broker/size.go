package broker

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Size is the most the broker's etcd stores for its members under a set of
// settings: each member's ResourceQuota (object counts) times the largest
// object of each kind the admission policies let a member write, as the API
// server encodes it (JSON for export records, a custom resource; protobuf
// for the built-in kinds), with etcd's bookkeeping per key. The limits come
// from Settings.MemberBudget, the same numbers the policies read, and
// TestTheWorstCaseObjectsFitTheirComputedSize writes the largest objects
// the policies accept to a real broker and checks that they take no more.
type Size struct {
	Settings Settings
	// Record, Slice, Lease and Claim are one object of each kind at worst.
	Record, Slice, Lease, Claim int64
	// Identity is what a member's identity, declaration and namespace
	// take, written by the administrator.
	Identity int64
	// Member is one member at worst; Clusterset is MaxMembers of them.
	Member, Clusterset int64
	// Limit is what the members may take: half the etcd quota, the other
	// half left for history between compactions, fragmentation of etcd's
	// database and the broker's own objects.
	Limit int64
}

// Bytes of encoding and bookkeeping, as upper bounds.
const (
	// metaFixed: metadata the API server sets (uid, resourceVersion,
	// generation, creation and deletion times) and the JSON or protobuf
	// framing of the object and its metadata.
	metaFixed = 640
	// etcdPerKey: etcd keeps the key (/registry/<resource>/<namespace>/<name>,
	// at most about 320 bytes) with each revision, and its revisions and
	// the database's element headers.
	etcdPerKey = 2*320 + 96
	// identityFixed: a member's ServiceAccount, token Secret (token and the
	// broker's CA), RoleBindings, declaration, namespace and quota.
	identityFixed = 16 << 10
	// Longest names a member writes, as the source-cluster policy allows
	// them: <namespace>.<name>.<cluster>[.<family>-<index>] of RFC 1123
	// labels, cluster-<cluster>, clustersetip-<cluster>-ipv6.
	recordNameBytes = 3*63 + 2
	sliceNameBytes  = recordNameBytes + len(".ipv6-999999")
	leaseNameBytes  = len("cluster-") + 63
	claimNameBytes  = len("clustersetip-") + 63 + len("-ipv6")
	namespaceBytes  = 63
	// ipBytes: the longest IP address text, an IPv6 address ending in an
	// IPv4 one.
	ipBytes = len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255")
)

// WorstCase computes what members can store at most under settings (zero
// fields are the defaults).
func WorstCase(settings Settings) Size {
	s := settings.WithDefaults()
	b := s.MemberBudget
	// What every member object may carry besides its own fields. Labels
	// and annotations are charged their key, value and 16 bytes each,
	// more than JSON (`"k":"v",`) or protobuf (a map entry) spends; an
	// export record's annotation values are stored as JSON strings, where
	// the policy leaves only " and \ to escape, in two bytes each.
	// managedFields are charged more than they encode to (160 per entry,
	// 16 per key against at most 136 and 6).
	meta := func(name, annotations int) int64 {
		return int64(metaFixed + name + namespaceBytes + b.LabelBytes + annotations + b.ManagedFieldsBytes + 32)
	}
	str := int64(b.StringBytes)
	var z Size
	z.Settings = s
	// An export record, JSON: its ports ({"name":…,"protocol":"SCTP",
	// "appProtocol":…,"port":65535}, 59 bytes besides the two strings), two
	// VIPs and families, the fields of one value each, and the JSON keys.
	z.Record = meta(recordNameBytes, 2*(b.AnnotationBytes+b.ExportedMetadataBytes)) +
		int64(b.PortsPerRecord)*(59+63+str) +
		2*int64(ipBytes+3) + 2*(4+3) + 2*str + 400 + etcdPerKey
	// An EndpointSlice, protobuf: endpoints of one address, three
	// conditions and a hostname (fields, lengths and the message: 12
	// bytes), ports of a name, protocol, number and appProtocol (16 bytes
	// of framing), the address type.
	z.Slice = meta(sliceNameBytes, b.AnnotationBytes) +
		int64(b.EndpointsPerSlice)*int64(ipBytes+8+63+12) +
		int64(b.PortsPerRecord)*(63+4+5+str+16) + 16 + etcdPerKey
	// A Lease, protobuf: three strings, two times and two numbers.
	z.Lease = meta(leaseNameBytes, b.AnnotationBytes) + 3*(str+3) + 2*24 + 2*11 + etcdPerKey
	// A claim, a ConfigMap: one key and one IPv6 CIDR.
	z.Claim = meta(claimNameBytes, b.AnnotationBytes) + int64(len("block")+ipBytes+4+8) + 4 + etcdPerKey
	z.Identity = identityFixed
	z.Member = int64(b.ServiceImports)*z.Record + int64(b.EndpointSlices)*z.Slice + z.Lease + 2*z.Claim + z.Identity
	z.Clusterset = int64(s.MaxMembers) * z.Member
	z.Limit = s.EtcdQuotaBytes / 2
	return z
}

// Fits returns nil when the clusterset's worst case fits the limit, and
// otherwise an error saying by how much it does not and what to change.
func (z Size) Fits() error {
	if z.Clusterset <= z.Limit {
		return nil
	}
	return fmt.Errorf("broker settings: %d members of at most %s each may store %s, more than %s (half the etcd quota of %s): lower %s, %s, %s or the byte budgets, or raise %s with etcd's --quota-backend-bytes",
		z.Settings.MaxMembers, human(z.Member), human(z.Clusterset), human(z.Limit), human(z.Settings.EtcdQuotaBytes),
		settingMaxMembers, settingServiceImports, settingEndpointSlices, settingEtcdQuota)
}

// Print writes the worst case, kind by kind, to w.
func (z Size) Print(w io.Writer) error {
	b := z.Settings.MemberBudget
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "per member\tcount\tworst each\tworst in all\t")
	row := func(what string, n int, each int64) {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", what, n, human(each), human(int64(n)*each))
	}
	row("export records", b.ServiceImports, z.Record)
	row("EndpointSlices", b.EndpointSlices, z.Slice)
	row("Lease", 1, z.Lease)
	row("ClusterSetIP claims", 2, z.Claim)
	row("identity and namespace", 1, z.Identity)
	fmt.Fprintf(tw, "one member\t\t\t%s\t\n", human(z.Member))
	fmt.Fprintf(tw, "%d members\t\t\t%s\t\n", z.Settings.MaxMembers, human(z.Clusterset))
	fmt.Fprintf(tw, "limit (half the etcd quota of %s)\t\t\t%s\t\n", human(z.Settings.EtcdQuotaBytes), human(z.Limit))
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "fits"
	if z.Clusterset > z.Limit {
		verdict = "does NOT fit"
	}
	_, err := fmt.Fprintf(w, "the clusterset's worst case %s: %.0f%% of the limit, %.0f%% of the etcd quota\n",
		verdict, 100*float64(z.Clusterset)/float64(z.Limit), 100*float64(z.Clusterset)/float64(z.Settings.EtcdQuotaBytes))
	return err
}

// human writes n bytes in binary units, as etcd's quota is given.
func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, prefix := float64(n), "KMGTPE"
	i := -1
	for v >= unit && i < len(prefix)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, prefix[i])
}
