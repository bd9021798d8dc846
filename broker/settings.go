package broker

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// SettingsName is the ConfigMap of the broker namespace that holds the
// broker's Settings: the parameter of the admission policies, written by
// the administrator (Install), never by members, which read their
// clusterset ranges from it (ReadSettings).
const SettingsName = record.SettingsName

// Keys of the settings ConfigMap; the admission policies read them.
const (
	settingClusterSetCIDRv4 = "clusterSetCIDRv4"
	settingClusterSetCIDRv6 = "clusterSetCIDRv6"
	settingBlockBitsV4      = "blockBitsV4"
	settingBlockBitsV6      = "blockBitsV6"
	settingMaxMembers       = "maxMembers"
	settingEtcdQuota        = "etcdQuotaBytes"
	settingServiceImports   = "memberServiceImports"
	settingEndpointSlices   = "memberEndpointSlices"
	settingPorts            = "portsPerRecord"
	settingEndpoints        = "endpointsPerSlice"
	settingExportedMetadata = "exportedMetadataBytes"
	settingLabels           = "labelBytes"
	settingAnnotations      = "annotationBytes"
	settingManagedFields    = "managedFieldsBytes"
	settingStrings          = "stringBytes"
)

// Settings are what the broker's administrator decides for the whole
// clusterset. The zero value of each field means its default.
type Settings struct {
	// Namespace is the broker namespace (default DefaultNamespace).
	Namespace string
	// ClusterSetCIDRv4 and ClusterSetCIDRv6 are the clusterset ranges
	// (default vipalloc.DefaultClusterSetCIDRv4 and v6): ClusterSetIP
	// claims and VIPs of export records must lie inside them. Members must
	// run with the same ranges (Ranges): mcsd reads them from here, and
	// refuses a --clusterset-cidrs that disagrees.
	ClusterSetCIDRv4, ClusterSetCIDRv6 netip.Prefix
	// BlockBitsV4 and BlockBitsV6 are the prefix lengths of the block each
	// member claims (default vipalloc.DefaultBlockBitsV4 and V6),
	// read by every member's mcsd as its --vip-block-bits-ipv4 and -ipv6.
	BlockBitsV4, BlockBitsV6 int
	// MaxMembers is how many members may join (default
	// DefaultMaxMembers): AddMember refuses one more.
	MaxMembers int
	// EtcdQuotaBytes is the broker etcd's backend quota (default
	// DefaultEtcdQuotaBytes, etcd's own default). MaxMembers worst cases
	// (WorstCase) must fit in half of it.
	EtcdQuotaBytes int64
	// MemberBudget bounds what each member may store (default
	// DefaultMemberBudget), field by field.
	MemberBudget Budget
}

// Budget is what one member may store on the broker: counts, enforced by
// the ResourceQuota of its namespace, and sizes, enforced by the admission
// policy mcsd-broker-member-budget. Each zero field takes its default.
type Budget struct {
	// ServiceImports and EndpointSlices are the member's export records
	// and EndpointSlices (it has one Lease besides).
	ServiceImports, EndpointSlices int
	// PortsPerRecord bounds the ports of a record and of a slice.
	PortsPerRecord int
	// EndpointsPerSlice bounds the endpoints of a slice; exporters write
	// at most record.MaxEndpointsPerSlice.
	EndpointsPerSlice int
	// ExportedMetadataBytes bounds a record's exported labels and
	// annotations (the JSON of both).
	ExportedMetadataBytes int
	// LabelBytes, AnnotationBytes and ManagedFieldsBytes bound the labels,
	// the annotations (besides the exported ones) and the managedFields of
	// any member object, counted as budget-policy.yaml says; StringBytes
	// bounds free strings the API server does not (appProtocol,
	// trafficDistribution, a Lease's holder).
	LabelBytes, AnnotationBytes, ManagedFieldsBytes, StringBytes int
}

// fields are the fields of b by their settings keys.
func (b *Budget) fields() map[string]*int {
	return map[string]*int{
		settingServiceImports: &b.ServiceImports, settingEndpointSlices: &b.EndpointSlices,
		settingPorts: &b.PortsPerRecord, settingEndpoints: &b.EndpointsPerSlice,
		settingExportedMetadata: &b.ExportedMetadataBytes, settingLabels: &b.LabelBytes,
		settingAnnotations: &b.AnnotationBytes, settingManagedFields: &b.ManagedFieldsBytes,
		settingStrings: &b.StringBytes,
	}
}

// BudgetKeys are the names of a Budget's fields in the settings
// ConfigMap, sorted: what Set takes.
func BudgetKeys() []string { return slices.Sorted(maps.Keys((&Budget{}).fields())) }

// Get is the field of b that the settings ConfigMap calls key (0 for an
// unknown key).
func (b Budget) Get(key string) int {
	if f, ok := b.fields()[key]; ok {
		return *f
	}
	return 0
}

// Set sets the field of b that the settings ConfigMap calls key.
func (b *Budget) Set(key string, v int) error {
	f, ok := b.fields()[key]
	if !ok {
		return fmt.Errorf("unknown member budget %q: want one of %s", key, strings.Join(BudgetKeys(), ", "))
	}
	if v < 0 {
		return fmt.Errorf("member budget %s=%d: not a count", key, v)
	}
	*f = v
	return nil
}

// Defaults. They fit the default etcd quota with room to spare (see
// WorstCase): about 2000 services of up to 1.5 slices each per member, for
// ten members.
const (
	DefaultMaxMembers           = 10
	DefaultEtcdQuotaBytes int64 = 2 << 30
)

// DefaultMemberBudget is the default per-member budget.
var DefaultMemberBudget = Budget{
	ServiceImports: 2000, EndpointSlices: 3000,
	PortsPerRecord: 32, EndpointsPerSlice: record.MaxEndpointsPerSlice,
	ExportedMetadataBytes: 2048,
	LabelBytes:            512, AnnotationBytes: 512, ManagedFieldsBytes: 2048, StringBytes: 63,
}

// minimumBudget is what mcsd's own writes need: a smaller budget would
// refuse them.
var minimumBudget = Budget{
	PortsPerRecord: 1, EndpointsPerSlice: record.MaxEndpointsPerSlice,
	LabelBytes: 512, AnnotationBytes: 256, ManagedFieldsBytes: 1536, StringBytes: 63,
}

// WithDefaults returns s with every zero field set to its default, as
// Install and Objects apply it.
func (s Settings) WithDefaults() Settings {
	if s.Namespace == "" {
		s.Namespace = DefaultNamespace
	}
	if !s.ClusterSetCIDRv4.IsValid() {
		s.ClusterSetCIDRv4 = vipalloc.DefaultClusterSetCIDRv4
	}
	if !s.ClusterSetCIDRv6.IsValid() {
		s.ClusterSetCIDRv6 = vipalloc.DefaultClusterSetCIDRv6
	}
	if s.BlockBitsV4 == 0 {
		s.BlockBitsV4 = vipalloc.DefaultBlockBitsV4
	}
	if s.BlockBitsV6 == 0 {
		s.BlockBitsV6 = vipalloc.DefaultBlockBitsV6
	}
	if s.MaxMembers == 0 {
		s.MaxMembers = DefaultMaxMembers
	}
	if s.EtcdQuotaBytes == 0 {
		s.EtcdQuotaBytes = DefaultEtcdQuotaBytes
	}
	s.MemberBudget = s.MemberBudget.withDefaults()
	s.ClusterSetCIDRv4, s.ClusterSetCIDRv6 = s.ClusterSetCIDRv4.Masked(), s.ClusterSetCIDRv6.Masked()
	return s
}

func (b Budget) withDefaults() Budget {
	d := DefaultMemberBudget
	defaults := d.fields()
	for key, v := range b.fields() {
		if *v == 0 {
			*v = *defaults[key]
		}
	}
	return b
}

// validate checks the settings' form; Fits checks that they fit the etcd
// quota.
func (s Settings) validate() error {
	if !s.ClusterSetCIDRv4.Addr().Is4() {
		return fmt.Errorf("broker settings: the IPv4 clusterset CIDR %s is not IPv4", s.ClusterSetCIDRv4)
	}
	if !s.ClusterSetCIDRv6.Addr().Is6() || s.ClusterSetCIDRv6.Addr().Is4In6() {
		return fmt.Errorf("broker settings: the IPv6 clusterset CIDR %s is not IPv6", s.ClusterSetCIDRv6)
	}
	if s.BlockBitsV4 < s.ClusterSetCIDRv4.Bits() || s.BlockBitsV4 > 32 {
		return fmt.Errorf("broker settings: IPv4 blocks of /%d do not fit the clusterset CIDR %s", s.BlockBitsV4, s.ClusterSetCIDRv4)
	}
	if s.BlockBitsV6 < s.ClusterSetCIDRv6.Bits() || s.BlockBitsV6 > 128 {
		return fmt.Errorf("broker settings: IPv6 blocks of /%d do not fit the clusterset CIDR %s", s.BlockBitsV6, s.ClusterSetCIDRv6)
	}
	if s.MaxMembers < 1 {
		return fmt.Errorf("broker settings: maxMembers %d: at least one member must fit", s.MaxMembers)
	}
	if s.EtcdQuotaBytes < 1 {
		return fmt.Errorf("broker settings: etcdQuotaBytes %d is not a size", s.EtcdQuotaBytes)
	}
	b, min := s.MemberBudget, minimumBudget
	if b.ServiceImports < 0 || b.EndpointSlices < 0 {
		return fmt.Errorf("broker settings: negative member budget %+v", b)
	}
	for _, f := range []struct {
		key      string
		v, least int
	}{
		{settingPorts, b.PortsPerRecord, min.PortsPerRecord},
		{settingEndpoints, b.EndpointsPerSlice, min.EndpointsPerSlice},
		{settingExportedMetadata, b.ExportedMetadataBytes, 0},
		{settingLabels, b.LabelBytes, min.LabelBytes},
		{settingAnnotations, b.AnnotationBytes, min.AnnotationBytes},
		{settingManagedFields, b.ManagedFieldsBytes, min.ManagedFieldsBytes},
		{settingStrings, b.StringBytes, min.StringBytes},
	} {
		if f.v < f.least {
			return fmt.Errorf("broker settings: %s %d is below %d, which mcsd's own writes need", f.key, f.v, f.least)
		}
	}
	if b.EndpointsPerSlice > 1000 {
		return fmt.Errorf("broker settings: %s %d is more than an EndpointSlice holds (1000)", settingEndpoints, b.EndpointsPerSlice)
	}
	return nil
}

// data is the settings ConfigMap's data.
func (s Settings) data() map[string]string {
	b := s.MemberBudget
	return map[string]string{
		settingClusterSetCIDRv4: s.ClusterSetCIDRv4.String(),
		settingClusterSetCIDRv6: s.ClusterSetCIDRv6.String(),
		settingBlockBitsV4:      strconv.Itoa(s.BlockBitsV4),
		settingBlockBitsV6:      strconv.Itoa(s.BlockBitsV6),
		settingMaxMembers:       strconv.Itoa(s.MaxMembers),
		settingEtcdQuota:        strconv.FormatInt(s.EtcdQuotaBytes, 10),
		settingServiceImports:   strconv.Itoa(b.ServiceImports),
		settingEndpointSlices:   strconv.Itoa(b.EndpointSlices),
		settingPorts:            strconv.Itoa(b.PortsPerRecord),
		settingEndpoints:        strconv.Itoa(b.EndpointsPerSlice),
		settingExportedMetadata: strconv.Itoa(b.ExportedMetadataBytes),
		settingLabels:           strconv.Itoa(b.LabelBytes),
		settingAnnotations:      strconv.Itoa(b.AnnotationBytes),
		settingManagedFields:    strconv.Itoa(b.ManagedFieldsBytes),
		settingStrings:          strconv.Itoa(b.StringBytes),
	}
}

// ParseSettings reads the settings ConfigMap, as members and tools may.
func ParseSettings(cm *corev1.ConfigMap) (Settings, error) {
	s := Settings{Namespace: cm.Namespace}
	var err error
	prefix := func(key string) netip.Prefix {
		if err != nil {
			return netip.Prefix{}
		}
		var p netip.Prefix
		if p, err = netip.ParsePrefix(cm.Data[key]); err != nil {
			err = fmt.Errorf("broker settings %s: %s: %w", cm.Name, key, err)
		}
		return p
	}
	number := func(key string) int {
		if err != nil {
			return 0
		}
		var n int
		if n, err = strconv.Atoi(cm.Data[key]); err != nil {
			err = fmt.Errorf("broker settings %s: %s: %w (is the broker installed by this version?)", cm.Name, key, err)
		}
		return n
	}
	s.ClusterSetCIDRv4 = prefix(settingClusterSetCIDRv4)
	s.ClusterSetCIDRv6 = prefix(settingClusterSetCIDRv6)
	s.BlockBitsV4 = number(settingBlockBitsV4)
	s.BlockBitsV6 = number(settingBlockBitsV6)
	s.MaxMembers = number(settingMaxMembers)
	s.EtcdQuotaBytes = int64(number(settingEtcdQuota))
	s.MemberBudget = Budget{
		ServiceImports:        number(settingServiceImports),
		EndpointSlices:        number(settingEndpointSlices),
		PortsPerRecord:        number(settingPorts),
		EndpointsPerSlice:     number(settingEndpoints),
		ExportedMetadataBytes: number(settingExportedMetadata),
		LabelBytes:            number(settingLabels),
		AnnotationBytes:       number(settingAnnotations),
		ManagedFieldsBytes:    number(settingManagedFields),
		StringBytes:           number(settingStrings),
	}
	if err != nil {
		return Settings{}, err
	}
	return s, s.validate()
}

// MemberQuotaName is the ResourceQuota of each member's namespace.
const MemberQuotaName = "mcsd-member"

// memberQuota is the ResourceQuota of one member's namespace: its budget
// of records and slices, and its one Lease.
func memberQuota(b Budget) corev1.ResourceList {
	count := func(v int) resource.Quantity { return *resource.NewQuantity(int64(v), resource.DecimalSI) }
	return corev1.ResourceList{
		"count/serviceimports.multicluster.x-k8s.io": count(b.ServiceImports),
		"count/endpointslices.discovery.k8s.io":      count(b.EndpointSlices),
		"count/leases.coordination.k8s.io":           count(1),
	}
}
