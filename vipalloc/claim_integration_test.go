package vipalloc_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

func TestBlockClaimsOnARealBroker(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := broker.Install(ctx, cs.Broker.Config, broker.Settings{}); err != nil {
		t.Fatal(err)
	}
	// Each member its own pod CIDR: 10.<n>.0.0/16.
	members := 0
	claimer := func(t *testing.T, id string) vipalloc.Claimer {
		members++
		pods := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(members), 0, 0}), 16)
		token, err := broker.AddMember(ctx, cs.Broker.Kube, broker.DefaultNamespace, id, broker.MemberOptions{PodCIDRs: []netip.Prefix{pods}})
		if err != nil {
			t.Fatal(err)
		}
		return vipalloc.Claimer{Kube: kubernetes.NewForConfigOrDie(cs.Broker.TokenConfig(token)), Namespace: broker.DefaultNamespace, ClusterID: id}
	}
	v4 := vipalloc.DefaultClusterSetCIDRv4

	east := claimer(t, "east")
	west := claimer(t, "west")
	var eastBlock netip.Prefix

	t.Run("two clusters get distinct default blocks", func(t *testing.T) {
		var err error
		eastBlock, err = east.Claim(ctx, v4, netip.Prefix{}, vipalloc.DefaultBlockBitsV4)
		if err != nil {
			t.Fatal(err)
		}
		westBlock, err := west.Claim(ctx, v4, netip.Prefix{}, vipalloc.DefaultBlockBitsV4)
		if err != nil {
			t.Fatal(err)
		}
		if eastBlock.Overlaps(westBlock) || eastBlock.Bits() != 16 || !v4.Contains(westBlock.Addr()) {
			t.Fatalf("east %s, west %s", eastBlock, westBlock)
		}
	})

	t.Run("a restarted cluster gets the block it already holds", func(t *testing.T) {
		again, err := east.Claim(ctx, v4, netip.Prefix{}, vipalloc.DefaultBlockBitsV4)
		if err != nil || again != eastBlock {
			t.Fatalf("re-claim = %s, %v; want %s", again, err, eastBlock)
		}
	})

	t.Run("a requested block overlapping another cluster's is an error naming that cluster", func(t *testing.T) {
		north := claimer(t, "north")
		overlap := netip.PrefixFrom(eastBlock.Addr(), 20)
		_, err := north.Claim(ctx, v4, overlap, 0)
		if err == nil || !strings.Contains(err.Error(), "east") {
			t.Fatalf("claiming %s: %v, want an error naming east", overlap, err)
		}
		wider := netip.PrefixFrom(eastBlock.Addr(), 12).Masked()
		if _, err := north.Claim(ctx, v4, wider, 0); err == nil || !strings.Contains(err.Error(), "east") {
			t.Fatalf("claiming %s: %v, want an error naming east", wider, err)
		}
		if _, err := north.Claim(ctx, v4, netip.MustParsePrefix("10.0.0.0/16"), 0); err == nil {
			t.Fatal("a block outside the clusterset range was accepted")
		}
	})

	t.Run("clusters claiming at the same moment never share a block", func(t *testing.T) {
		const n = 6
		blocks := make([]netip.Prefix, n)
		errs := make([]error, n)
		claimers := make([]vipalloc.Claimer, n)
		for i := range claimers {
			claimers[i] = claimer(t, fmt.Sprintf("racer%d", i))
		}
		var wg sync.WaitGroup
		for i := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				blocks[i], errs[i] = claimers[i].Claim(ctx, v4, netip.Prefix{}, vipalloc.DefaultBlockBitsV4)
			}()
		}
		wg.Wait()
		for i := range blocks {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			for j := 0; j < i; j++ {
				if blocks[i].Overlaps(blocks[j]) {
					t.Fatalf("racer%d and racer%d share %s", i, j, blocks[i])
				}
			}
		}
	})

	t.Run("IPv6 blocks come from the ULA range", func(t *testing.T) {
		b, err := east.Claim(ctx, vipalloc.DefaultClusterSetCIDRv6, netip.Prefix{}, vipalloc.DefaultBlockBitsV6)
		if err != nil || !b.Addr().Is6() || b.Bits() != 64 {
			t.Fatalf("v6 block %s, %v", b, err)
		}
	})

	t.Run("a cluster cannot withdraw another cluster's claim", func(t *testing.T) {
		// Install returned once the policies were enforced: the very first
		// forbidden write is refused.
		name := vipalloc.ClaimName("east", corev1.IPv4Protocol)
		err := west.Kube.CoreV1().ConfigMaps(broker.DefaultNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err == nil || !strings.Contains(err.Error(), "cluster west may not change or delete an object of cluster east") {
			t.Fatalf("west deleting east's claim %s: %v, want the broker's admission policy to refuse it", name, err)
		}
		if again, err := east.Claim(ctx, v4, netip.Prefix{}, vipalloc.DefaultBlockBitsV4); err != nil || again != eastBlock {
			t.Fatalf("east's block after west's attempt = %s, %v; want %s", again, err, eastBlock)
		}
	})
}
