package vipalloc

import (
	"context"
	"fmt"
	"math/big"
	"net/netip"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
)

// A claim is a ConfigMap in the broker namespace named for the claiming
// cluster and the IP family, "clustersetip-<cluster>-ipv4", so a member
// holds at most one block per family and cannot write a claim in another
// member's name (the broker's admission policy checks name, label and
// block). Two claims may still overlap: the one the broker stored first
// owns the addresses, and every reader applies that same rule (see Owners).
// "First" is the claim's resourceVersion, the etcd revision that created
// it (members cannot update claims, so it never moves): a claimer lists
// after creating, and that list holds every claim stored before its own,
// which makes the rule safe under concurrent claims where the second-grained
// creationTimestamp is not.
const (
	// LabelClaim marks a ConfigMap as a ClusterSetIP block claim.
	LabelClaim = record.LabelClaim
	// ClaimKey is the data key holding the claimed block.
	ClaimKey = "block"
)

// ClaimName is the name of the ConfigMap in which cluster claims its block
// of family.
func ClaimName(cluster string, family corev1.IPFamily) string {
	suffix := "ipv4"
	if family == corev1.IPv6Protocol {
		suffix = "ipv6"
	}
	return "clustersetip-" + cluster + "-" + suffix
}

func familyOf(p netip.Prefix) corev1.IPFamily {
	if p.Addr().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// Claim is one cluster's claim of a block, as the broker holds it.
type Claim struct {
	Block   netip.Prefix
	Cluster string
	Name    string
	Created metav1.Time
	// Revision is the claim's resourceVersion as a number, 0 when it is not
	// one (then Created orders it).
	Revision uint64
}

// ParseClaim reads a claim ConfigMap. It refuses one whose block is not a
// masked prefix, has no cluster label, or whose name is not the one its
// cluster and block's family give: such an object was not written by a
// member through the admission policy, and owns nothing.
func ParseClaim(cm *corev1.ConfigMap) (Claim, error) {
	block, err := netip.ParsePrefix(cm.Data[ClaimKey])
	if err != nil {
		return Claim{}, fmt.Errorf("claim %s: %q is not a CIDR: %w", cm.Name, cm.Data[ClaimKey], err)
	}
	if block != block.Masked() {
		return Claim{}, fmt.Errorf("claim %s: %s has host bits set", cm.Name, block)
	}
	cluster := cm.Labels[mcsv1beta1.LabelSourceCluster]
	if cluster == "" {
		return Claim{}, fmt.Errorf("claim %s: no label %s", cm.Name, mcsv1beta1.LabelSourceCluster)
	}
	if want := ClaimName(cluster, familyOf(block)); cm.Name != want {
		return Claim{}, fmt.Errorf("claim %s of cluster %s for %s: its name must be %s", cm.Name, cluster, block, want)
	}
	rev, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
	return Claim{Block: block, Cluster: cluster, Name: cm.Name, Created: cm.CreationTimestamp, Revision: rev}, nil
}

// ParseClaims parses every claim among objs (an informer's ConfigMaps) and
// returns those that parse, and why the others do not.
func ParseClaims(objs []any) (claims []Claim, malformed []error) {
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			c, err := ParseClaim(cm)
			if err != nil {
				malformed = append(malformed, err)
				continue
			}
			claims = append(claims, c)
		}
	}
	return claims, malformed
}

// Owners returns the claims that own their block: each claim in the order
// the broker stored them (revision, else creationTimestamp, then name)
// unless it overlaps an earlier owner. Every member computes the same
// owners from the same claims.
func Owners(claims []Claim) []Claim {
	sorted := append([]Claim(nil), claims...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if a, b := sorted[i].Revision, sorted[j].Revision; a != 0 && b != 0 && a != b {
			return a < b
		}
		if !sorted[i].Created.Equal(&sorted[j].Created) {
			return sorted[i].Created.Before(&sorted[j].Created)
		}
		return sorted[i].Name < sorted[j].Name
	})
	var owners []Claim
	for _, c := range sorted {
		if overlapping(owners, c.Block, "") == nil {
			owners = append(owners, c)
		}
	}
	return owners
}

// OwnerOf returns the cluster whose owning claim holds ip, among owners
// (the result of Owners).
func OwnerOf(owners []Claim, ip netip.Addr) (string, bool) {
	ip = ip.Unmap()
	for _, c := range owners {
		if c.Block.Contains(ip) {
			return c.Cluster, true
		}
	}
	return "", false
}

// Claimer claims this cluster's block on the broker.
type Claimer struct {
	Kube      kubernetes.Interface
	Namespace string
	ClusterID string
}

// list returns the well-formed claims of family's IP family, oldest first.
func (c Claimer) list(ctx context.Context, family netip.Prefix) ([]Claim, error) {
	cms, err := c.Kube.CoreV1().ConfigMaps(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelClaim})
	if err != nil {
		return nil, fmt.Errorf("listing ClusterSetIP block claims on the broker: %w", err)
	}
	var claims []Claim
	for i := range cms.Items {
		cl, err := ParseClaim(&cms.Items[i])
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Ignoring a malformed ClusterSetIP block claim", "err", err)
			continue
		}
		if cl.Block.Addr().Is4() == family.Addr().Is4() {
			claims = append(claims, cl)
		}
	}
	return claims, nil
}

// Claim returns this cluster's block of clusterSet: the one it already holds
// (after a restart), else requested when valid (bits is then ignored), else
// the first free block of the given size. A requested block that overlaps
// another cluster's claim is an error naming that cluster.
func (c Claimer) Claim(ctx context.Context, clusterSet, requested netip.Prefix, bits int) (netip.Prefix, error) {
	clusterSet = clusterSet.Masked()
	claims, err := c.list(ctx, clusterSet)
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, cl := range Owners(claims) {
		if cl.Cluster != c.ClusterID || !clusterSet.Contains(cl.Block.Addr()) {
			continue
		}
		if requested.IsValid() && requested.Masked() != cl.Block {
			return netip.Prefix{}, fmt.Errorf("this cluster already holds ClusterSetIP block %s (ConfigMap %s/%s), not %s: its VIPs stay valid, so release it first", cl.Block, c.Namespace, cl.Name, requested)
		}
		return cl.Block, nil
	}
	// A claim of ours that lost to an older overlapping one owns nothing:
	// withdraw it and claim again.
	for _, cl := range claims {
		if cl.Cluster == c.ClusterID && clusterSet.Contains(cl.Block.Addr()) {
			if err := c.Release(ctx, cl.Block); err != nil {
				return netip.Prefix{}, fmt.Errorf("withdrawing claim %s, which lost block %s to an older claim: %w", cl.Name, cl.Block, err)
			}
		}
	}

	if requested.IsValid() {
		requested = requested.Masked()
		if !clusterSet.Contains(requested.Addr()) || requested.Bits() < clusterSet.Bits() {
			return netip.Prefix{}, fmt.Errorf("ClusterSetIP block %s is not inside the clusterset range %s", requested, clusterSet)
		}
		if other := overlapping(claims, requested, c.ClusterID); other != nil {
			return netip.Prefix{}, fmt.Errorf("ClusterSetIP block %s overlaps block %s claimed by cluster %s", requested, other.Block, other.Cluster)
		}
		ok, err := c.tryClaim(ctx, requested)
		if err != nil {
			return netip.Prefix{}, err
		}
		if !ok {
			return netip.Prefix{}, fmt.Errorf("ClusterSetIP block %s was claimed by another cluster at the same moment", requested)
		}
		return requested, nil
	}

	if bits < clusterSet.Bits() || bits > clusterSet.Addr().BitLen() {
		return netip.Prefix{}, fmt.Errorf("block size /%d does not fit the clusterset range %s", bits, clusterSet)
	}
	count := new(big.Int).Lsh(big.NewInt(1), uint(bits-clusterSet.Bits()))
	for i := big.NewInt(0); i.Cmp(count) < 0; i.Add(i, big.NewInt(1)) {
		block := nthBlock(clusterSet, bits, i)
		if overlapping(claims, block, c.ClusterID) != nil {
			continue
		}
		ok, err := c.tryClaim(ctx, block)
		if err != nil {
			return netip.Prefix{}, err
		}
		if ok {
			return block, nil
		}
		// Another cluster won the block at the same moment: look again.
		if claims, err = c.list(ctx, clusterSet); err != nil {
			return netip.Prefix{}, err
		}
	}
	return netip.Prefix{}, fmt.Errorf("every /%d block of the clusterset range %s is claimed", bits, clusterSet)
}

// tryClaim creates the claim and checks that it owns its block, that is no
// older overlapping claim appeared meanwhile; it reports false, having
// withdrawn its claim, when another cluster won.
func (c Claimer) tryClaim(ctx context.Context, block netip.Prefix) (bool, error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ClaimName(c.ClusterID, familyOf(block)),
			Namespace: c.Namespace,
			Labels:    map[string]string{LabelClaim: "", mcsv1beta1.LabelSourceCluster: c.ClusterID},
		},
		Data: map[string]string{ClaimKey: block.String()},
	}
	if _, err := c.Kube.CoreV1().ConfigMaps(c.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return false, fmt.Errorf("claiming ClusterSetIP block %s on the broker: %w", block, err)
	}
	claims, err := c.list(ctx, block)
	if err != nil {
		return false, err
	}
	for _, cl := range Owners(claims) {
		if cl.Name == cm.Name {
			klog.FromContext(ctx).Info("Claimed ClusterSetIP block", "block", block, "clusterID", c.ClusterID)
			return true, nil
		}
	}
	if err := c.Kube.CoreV1().ConfigMaps(c.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("withdrawing claim %s, which lost block %s to an older claim: %w", cm.Name, block, err)
	}
	return false, nil
}

// Release withdraws this cluster's claim of block.
func (c Claimer) Release(ctx context.Context, block netip.Prefix) error {
	err := c.Kube.CoreV1().ConfigMaps(c.Namespace).Delete(ctx, ClaimName(c.ClusterID, familyOf(block)), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func overlapping(claims []Claim, block netip.Prefix, self string) *Claim {
	for i := range claims {
		if claims[i].Cluster != self && claims[i].Block.Overlaps(block) {
			return &claims[i]
		}
	}
	return nil
}

// nthBlock returns the i-th block of size bits inside parent.
func nthBlock(parent netip.Prefix, bits int, i *big.Int) netip.Prefix {
	raw := parent.Addr().AsSlice()
	base := new(big.Int).SetBytes(raw)
	offset := new(big.Int).Lsh(i, uint(parent.Addr().BitLen()-bits))
	sum := new(big.Int).Add(base, offset).FillBytes(make([]byte, len(raw)))
	addr, _ := netip.AddrFromSlice(sum)
	return netip.PrefixFrom(addr, bits)
}
