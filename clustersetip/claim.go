package clustersetip

import (
	"context"
	"fmt"
	"math/big"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// A claim is a ConfigMap in the broker namespace whose name is derived from
// the block, so the API server's name uniqueness makes two claims of the same
// block impossible; claims of different sizes that overlap are caught by
// listing after creating, where the older claim wins.
const (
	claimLabel = "mcsd.io/clustersetip-block"
	claimKey   = "block"
)

// ClaimName is the name of the ConfigMap that claims block.
func ClaimName(block netip.Prefix) string {
	addr := block.Masked().Addr()
	s := addr.String()
	if addr.Is6() {
		s = addr.StringExpanded()
	}
	return fmt.Sprintf("clustersetip-%s-%d", strings.NewReplacer(".", "-", ":", "-").Replace(s), block.Bits())
}

// Claimer claims this cluster's block on the broker.
type Claimer struct {
	Kube      kubernetes.Interface
	Namespace string
	ClusterID string
}

type claim struct {
	block   netip.Prefix
	cluster string
	name    string
	created metav1.Time
}

func (c Claimer) list(ctx context.Context, family netip.Prefix) ([]claim, error) {
	cms, err := c.Kube.CoreV1().ConfigMaps(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: claimLabel})
	if err != nil {
		return nil, fmt.Errorf("listing ClusterSetIP block claims on the broker: %w", err)
	}
	var claims []claim
	for _, cm := range cms.Items {
		block, err := netip.ParsePrefix(cm.Data[claimKey])
		if err != nil || block.Addr().Is4() != family.Addr().Is4() {
			continue
		}
		claims = append(claims, claim{block: block, cluster: cm.Labels[mcsv1beta1.LabelSourceCluster], name: cm.Name, created: cm.CreationTimestamp})
	}
	sort.Slice(claims, func(i, j int) bool {
		if !claims[i].created.Equal(&claims[j].created) {
			return claims[i].created.Before(&claims[j].created)
		}
		return claims[i].name < claims[j].name
	})
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
	for _, cl := range claims {
		if cl.cluster != c.ClusterID || !clusterSet.Contains(cl.block.Addr()) {
			continue
		}
		if requested.IsValid() && requested.Masked() != cl.block {
			return netip.Prefix{}, fmt.Errorf("this cluster already holds ClusterSetIP block %s (ConfigMap %s/%s), not %s: its VIPs stay valid, so release it first", cl.block, c.Namespace, cl.name, requested)
		}
		return cl.block, nil
	}

	if requested.IsValid() {
		requested = requested.Masked()
		if !clusterSet.Contains(requested.Addr()) || requested.Bits() < clusterSet.Bits() {
			return netip.Prefix{}, fmt.Errorf("ClusterSetIP block %s is not inside the clusterset range %s", requested, clusterSet)
		}
		if other := overlapping(claims, requested, c.ClusterID); other != nil {
			return netip.Prefix{}, fmt.Errorf("ClusterSetIP block %s overlaps block %s claimed by cluster %s", requested, other.block, other.cluster)
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
	}
	return netip.Prefix{}, fmt.Errorf("every /%d block of the clusterset range %s is claimed", bits, clusterSet)
}

// tryClaim creates the claim and checks no older overlapping claim of
// another size appeared meanwhile; it reports false, having withdrawn its
// claim, when another cluster won.
func (c Claimer) tryClaim(ctx context.Context, block netip.Prefix) (bool, error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ClaimName(block),
			Namespace: c.Namespace,
			Labels:    map[string]string{claimLabel: "", mcsv1beta1.LabelSourceCluster: c.ClusterID},
		},
		Data: map[string]string{claimKey: block.String()},
	}
	if _, err := c.Kube.CoreV1().ConfigMaps(c.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("claiming ClusterSetIP block %s on the broker: %w", block, err)
	}
	claims, err := c.list(ctx, block)
	if err != nil {
		return false, err
	}
	for _, cl := range claims {
		if cl.name == cm.Name {
			klog.InfoS("Claimed ClusterSetIP block", "block", block, "clusterID", c.ClusterID)
			return true, nil
		}
		if cl.cluster != c.ClusterID && cl.block.Overlaps(block) {
			_ = c.Kube.CoreV1().ConfigMaps(c.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{})
			return false, nil
		}
	}
	return false, fmt.Errorf("claim %s vanished right after it was created", cm.Name)
}

// Release withdraws this cluster's claim of block.
func (c Claimer) Release(ctx context.Context, block netip.Prefix) error {
	err := c.Kube.CoreV1().ConfigMaps(c.Namespace).Delete(ctx, ClaimName(block), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func overlapping(claims []claim, block netip.Prefix, self string) *claim {
	for i := range claims {
		if claims[i].cluster != self && claims[i].block.Overlaps(block) {
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
