package exporter

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"

	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// vipBook tracks which ClusterSetIPs the broker's records hold, so this
// cluster's allocator never hands out an address some record still uses —
// after a restart too, since it is filled from the records themselves — and
// frees an address of this cluster's block once no record holds it.
type vipBook struct {
	allocators map[corev1.IPFamily]*vipalloc.Allocator
	// rule is which records may hold which VIPs, as the claims stand now:
	// the importers' rule, applied before merging so that this cluster
	// copies only a VIP every importer takes.
	rule func() vipalloc.Rule

	mu      sync.Mutex
	holders map[netip.Addr]map[string]vipalloc.Holding // VIP -> records holding it, by name
}

func newVIPBook(allocators map[corev1.IPFamily]*vipalloc.Allocator, rule func() vipalloc.Rule) *vipBook {
	return &vipBook{allocators: allocators, rule: rule, holders: map[netip.Addr]map[string]vipalloc.Holding{}}
}

// holdersOf returns every record holding vip.
func (b *vipBook) holdersOf(vip netip.Addr) []vipalloc.Holding {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]vipalloc.Holding, 0, len(b.holders[vip]))
	for _, h := range b.holders[vip] {
		out = append(out, h)
	}
	return out
}

// observe records that the named record, whose hold is h, holds vips now
// (nil when deleted).
func (b *vipBook) observe(recordName string, h vipalloc.Holding, previous, current []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range previous {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		delete(b.holders[ip], recordName)
		if len(b.holders[ip]) == 0 {
			delete(b.holders, ip)
			if a := b.allocatorFor(ip); a != nil {
				a.Release(ip)
			}
		}
	}
	for _, s := range current {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		if b.holders[ip] == nil {
			b.holders[ip] = map[string]vipalloc.Holding{}
		}
		b.holders[ip][recordName] = h
		if a := b.allocatorFor(ip); a != nil {
			a.Reserve(ip)
		}
	}
}

func (b *vipBook) allocatorFor(ip netip.Addr) *vipalloc.Allocator {
	a := b.allocators[record.FamilyOf(ip)]
	if a == nil || !a.Contains(ip) {
		return nil
	}
	return a
}

// errVIPExhausted wraps allocation failures the user can act on.
var errVIPExhausted = errors.New("ClusterSetIP block exhausted")

// chooseVIPs decides the VIPs this cluster's record holds: the VIPs the
// merge settles on (the oldest record's that has one), so every exporter of
// a service carries the same VIP and it survives any one of them leaving;
// and for a family that has none yet, a fresh one from this cluster's block.
func (b *vipBook) chooseVIPs(own record.Export, others []record.Export) ([]string, error) {
	if own.Type != mcsv1beta1.ClusterSetIP || own.ClusterSetIPDisabled {
		return nil, nil
	}
	checked, _ := b.rule().Vet(append(slices.Clone(others), own), b.holdersOf)
	others, own = checked[:len(others)], checked[len(others)]
	res, err := merge.Merge(append(others, own))
	if err != nil {
		return nil, err
	}
	if res.Spec.Type != own.Type || (res.Oldest != own.Cluster && disabledByWinner(res, others)) {
		// Another type or the VIP opt-out wins: this export's VIP would
		// never be used.
		return nil, nil
	}
	chosen := map[corev1.IPFamily]string{}
	for _, s := range res.Spec.IPs {
		if ip, err := netip.ParseAddr(s); err == nil {
			chosen[record.FamilyOf(ip)] = s
		}
	}
	var out []string
	var errs []error
	for _, family := range own.IPFamilies {
		if vip, ok := chosen[family]; ok {
			out = append(out, vip)
			continue
		}
		a := b.allocators[family]
		if a == nil {
			errs = append(errs, fmt.Errorf("no %s ClusterSetIP block is configured", family))
			continue
		}
		ip, err := a.Allocate()
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %v", errVIPExhausted, err))
			continue
		}
		out = append(out, ip.String())
	}
	return out, errors.Join(errs...)
}

// release frees VIPs this cluster allocated for a record it then did not
// write, so a failed write leaks nothing.
func (b *vipBook) release(vips []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range vips {
		ip, err := netip.ParseAddr(s)
		if err != nil || len(b.holders[ip]) > 0 {
			continue
		}
		if a := b.allocatorFor(ip); a != nil {
			a.Release(ip)
		}
	}
}

func disabledByWinner(res merge.Result, others []record.Export) bool {
	for _, o := range others {
		if o.Cluster == res.Oldest {
			return o.ClusterSetIPDisabled
		}
	}
	return false
}
