package broker

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// Ranges are the settings every member must run with: the clusterset
// ranges ClusterSetIPs come from and the size of the block each member
// claims in them. Members read them from the broker (ReadSettings); they
// change only by the administrator's procedure (README, "Changing the
// clusterset ranges"), since every claimed block and VIP lies inside them.
type Ranges struct {
	// CIDRs are the clusterset ranges, at most one per IP family, IPv4
	// first.
	CIDRs []netip.Prefix
	// BlockBitsV4 and BlockBitsV6 are the prefix lengths of a member's
	// block in each family.
	BlockBitsV4, BlockBitsV6 int
}

// Ranges are the clusterset ranges of s.
func (s Settings) Ranges() Ranges {
	return Ranges{
		CIDRs:       []netip.Prefix{s.ClusterSetCIDRv4, s.ClusterSetCIDRv6},
		BlockBitsV4: s.BlockBitsV4,
		BlockBitsV6: s.BlockBitsV6,
	}
}

// CIDR is the range of r in the family of v4, if r has one.
func (r Ranges) CIDR(v4 bool) (netip.Prefix, bool) {
	for _, p := range r.CIDRs {
		if p.Addr().Is4() == v4 {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// BlockBits is the block size of r in the family of v4.
func (r Ranges) BlockBits(v4 bool) int {
	if v4 {
		return r.BlockBitsV4
	}
	return r.BlockBitsV6
}

// Agrees says whether o has r's range and block size in each family of r:
// a member may run with fewer families than the broker.
func (r Ranges) Agrees(o Ranges) bool {
	for _, p := range r.CIDRs {
		v4 := p.Addr().Is4()
		if q, ok := o.CIDR(v4); !ok || q != p || r.BlockBits(v4) != o.BlockBits(v4) {
			return false
		}
	}
	return true
}

// String is r as the settings ConfigMap's keys spell it, for messages that
// name both sides of a difference.
func (r Ranges) String() string {
	var parts []string
	for _, v4 := range []bool{true, false} {
		if p, ok := r.CIDR(v4); ok {
			key, bits := settingClusterSetCIDRv6, settingBlockBitsV6
			if v4 {
				key, bits = settingClusterSetCIDRv4, settingBlockBitsV4
			}
			parts = append(parts, key+"="+p.String(), bits+"="+strconv.Itoa(r.BlockBits(v4)))
		}
	}
	return strings.Join(parts, " ")
}

// ReadSettings reads the broker's settings in the broker namespace
// namespace, as a member may: members can list and watch the ConfigMaps
// there, not get them.
func ReadSettings(ctx context.Context, kube kubernetes.Interface, namespace string) (Settings, error) {
	list, err := kube.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", SettingsName).String(),
	})
	if err != nil {
		return Settings{}, fmt.Errorf("reading the broker settings %s/%s: %w", namespace, SettingsName, err)
	}
	if len(list.Items) == 0 {
		return Settings{}, fmt.Errorf("the broker has no settings %s/%s: install the broker with this version of kubectl mcs broker install, or check --broker-namespace", namespace, SettingsName)
	}
	return ParseSettings(&list.Items[0])
}
