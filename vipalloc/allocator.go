// Package vipalloc hands out ClusterSetIPs (clusterset-wide VIPs). Each
// cluster claims its own block of the clusterset range on the broker, so two
// clusters never hand out the same address, and allocates VIPs only from its
// block. The allocator keeps no state of its own that survives a restart: it
// is rebuilt from the VIPs the broker's records hold.
package vipalloc

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// Defaults of the clusterset ranges and of the block each cluster claims.
var (
	DefaultClusterSetCIDRv4 = netip.MustParsePrefix("243.0.0.0/8")
	DefaultClusterSetCIDRv6 = netip.MustParsePrefix("fd7a:6d63:7364::/48")
)

const (
	DefaultBlockBitsV4 = 16
	DefaultBlockBitsV6 = 64
)

// ErrExhausted says the cluster's block has no free address left.
var ErrExhausted = errors.New("no free ClusterSetIP left in this cluster's block")

// Allocator hands out addresses of one block. It is safe for concurrent use.
type Allocator struct {
	block netip.Prefix

	mu   sync.Mutex
	used map[netip.Addr]bool
	next netip.Addr
}

// NewAllocator returns an allocator over block. The block's first address is
// never handed out, so a VIP is never mistaken for a network address.
func NewAllocator(block netip.Prefix) *Allocator {
	block = block.Masked()
	a := &Allocator{block: block, used: map[netip.Addr]bool{}}
	// The block's first address is never handed out; the search starts
	// after it, and in a block of one address wraps straight back to it.
	a.next = a.step(block.Addr())
	return a
}

// Block is the range this allocator hands out from.
func (a *Allocator) Block() netip.Prefix { return a.block }

// Contains reports whether ip belongs to this allocator's block.
func (a *Allocator) Contains(ip netip.Addr) bool { return a.block.Contains(ip) }

// Reserve marks ip used, as when rebuilding from records. It reports false
// when ip is not in the block.
func (a *Allocator) Reserve(ip netip.Addr) bool {
	if !a.block.Contains(ip) {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.used[ip] = true
	return true
}

// Release frees ip for reuse.
func (a *Allocator) Release(ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, ip)
}

// Used reports how many addresses are taken.
func (a *Allocator) Used() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.used)
}

// Allocate returns a free address, searching on from the last one handed out
// so a just-released address is not reused at once.
func (a *Allocator) Allocate() (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := a.next
	ip := start
	for {
		if !a.used[ip] && ip != a.block.Addr() {
			a.used[ip] = true
			a.next = a.step(ip)
			return ip, nil
		}
		ip = a.step(ip)
		if ip == start {
			return netip.Addr{}, fmt.Errorf("%w (%s)", ErrExhausted, a.block)
		}
	}
}

func (a *Allocator) step(ip netip.Addr) netip.Addr {
	n := ip.Next()
	if !n.IsValid() || !a.block.Contains(n) {
		return a.block.Addr()
	}
	return n
}
