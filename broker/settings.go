package broker

import (
	"fmt"
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/mcsd-io/mcsd/clustersetip"
)

// SettingsName is the ConfigMap of the broker namespace that holds the
// broker's Settings: the parameter of the admission policy, written by the
// administrator (Install), never by members.
const SettingsName = "mcsd-broker-settings"

// Keys of the settings ConfigMap.
const (
	settingClusterSetCIDRv4 = "clusterSetCIDRv4"
	settingClusterSetCIDRv6 = "clusterSetCIDRv6"
	settingBlockBitsV4      = "blockBitsV4"
	settingBlockBitsV6      = "blockBitsV6"
	settingServiceImports   = "memberServiceImports"
	settingEndpointSlices   = "memberEndpointSlices"
	settingConfigMaps       = "memberConfigMaps"
	settingLeases           = "memberLeases"
)

// Settings are what the broker's administrator decides for the whole
// clusterset. The zero value of each field means its default.
type Settings struct {
	// Namespace is the broker namespace (default DefaultNamespace).
	Namespace string
	// ClusterSetCIDRv4 and ClusterSetCIDRv6 are the clusterset ranges
	// (default clustersetip.DefaultClusterSetCIDRv4 and v6): ClusterSetIP
	// claims and VIPs of export records must lie inside them. Members must
	// run with the same ranges (mcsd --clusterset-cidrs).
	ClusterSetCIDRv4, ClusterSetCIDRv6 netip.Prefix
	// BlockBitsV4 and BlockBitsV6 are the prefix lengths of the block each
	// member claims (default clustersetip.DefaultBlockBitsV4 and V6), as
	// mcsd's --vip-block-bits-ipv4 and -ipv6 on every member.
	BlockBitsV4, BlockBitsV6 int
	// MemberBudget is what each member adds to the broker namespace's
	// ResourceQuota (default DefaultMemberBudget).
	MemberBudget Budget
}

// Budget counts objects of the kinds members write to the broker namespace.
type Budget struct {
	ServiceImports, EndpointSlices, ConfigMaps, Leases int
}

// DefaultMemberBudget is the default per-member budget: the export records
// and EndpointSlices of 5000 exported services of up to four slices each,
// two ClusterSetIP claims and the member's declaration, one Lease.
var DefaultMemberBudget = Budget{ServiceImports: 5000, EndpointSlices: 20000, ConfigMaps: 3, Leases: 1}

// namespaceConfigMaps are the broker namespace's own ConfigMaps, counted by
// its quota besides the members': kube-root-ca.crt and the settings.
const namespaceConfigMaps = 2

// WithDefaults returns s with every zero field set to its default, as
// Install and Objects apply it.
func (s Settings) WithDefaults() Settings {
	if s.Namespace == "" {
		s.Namespace = DefaultNamespace
	}
	if !s.ClusterSetCIDRv4.IsValid() {
		s.ClusterSetCIDRv4 = clustersetip.DefaultClusterSetCIDRv4
	}
	if !s.ClusterSetCIDRv6.IsValid() {
		s.ClusterSetCIDRv6 = clustersetip.DefaultClusterSetCIDRv6
	}
	if s.BlockBitsV4 == 0 {
		s.BlockBitsV4 = clustersetip.DefaultBlockBitsV4
	}
	if s.BlockBitsV6 == 0 {
		s.BlockBitsV6 = clustersetip.DefaultBlockBitsV6
	}
	if s.MemberBudget == (Budget{}) {
		s.MemberBudget = DefaultMemberBudget
	}
	s.ClusterSetCIDRv4, s.ClusterSetCIDRv6 = s.ClusterSetCIDRv4.Masked(), s.ClusterSetCIDRv6.Masked()
	return s
}

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
	b := s.MemberBudget
	if b.ServiceImports < 0 || b.EndpointSlices < 0 || b.ConfigMaps < 0 || b.Leases < 0 {
		return fmt.Errorf("broker settings: negative member budget %+v", b)
	}
	return nil
}

// data is the settings ConfigMap's data.
func (s Settings) data() map[string]string {
	return map[string]string{
		settingClusterSetCIDRv4: s.ClusterSetCIDRv4.String(),
		settingClusterSetCIDRv6: s.ClusterSetCIDRv6.String(),
		settingBlockBitsV4:      strconv.Itoa(s.BlockBitsV4),
		settingBlockBitsV6:      strconv.Itoa(s.BlockBitsV6),
		settingServiceImports:   strconv.Itoa(s.MemberBudget.ServiceImports),
		settingEndpointSlices:   strconv.Itoa(s.MemberBudget.EndpointSlices),
		settingConfigMaps:       strconv.Itoa(s.MemberBudget.ConfigMaps),
		settingLeases:           strconv.Itoa(s.MemberBudget.Leases),
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
			err = fmt.Errorf("broker settings %s: %s: %w", cm.Name, key, err)
		}
		return n
	}
	s.ClusterSetCIDRv4 = prefix(settingClusterSetCIDRv4)
	s.ClusterSetCIDRv6 = prefix(settingClusterSetCIDRv6)
	s.BlockBitsV4 = number(settingBlockBitsV4)
	s.BlockBitsV6 = number(settingBlockBitsV6)
	s.MemberBudget = Budget{
		ServiceImports: number(settingServiceImports),
		EndpointSlices: number(settingEndpointSlices),
		ConfigMaps:     number(settingConfigMaps),
		Leases:         number(settingLeases),
	}
	if err != nil {
		return Settings{}, err
	}
	return s, s.validate()
}

// QuotaName is the broker namespace's ResourceQuota.
const QuotaName = "mcsd-broker"

// quotaHard is the broker namespace's ResourceQuota for members members:
// one budget each and one spare, plus the namespace's own ConfigMaps.
func quotaHard(b Budget, members int) corev1.ResourceList {
	n := int64(members + 1)
	count := func(v int, extra int64) resource.Quantity {
		return *resource.NewQuantity(n*int64(v)+extra, resource.DecimalSI)
	}
	return corev1.ResourceList{
		"count/serviceimports.multicluster.x-k8s.io": count(b.ServiceImports, 0),
		"count/endpointslices.discovery.k8s.io":      count(b.EndpointSlices, 0),
		"count/configmaps":                           count(b.ConfigMaps, namespaceConfigMaps),
		"count/leases.coordination.k8s.io":           count(b.Leases, 0),
	}
}
