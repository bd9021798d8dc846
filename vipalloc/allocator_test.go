package vipalloc

import (
	"errors"
	"net/netip"
	"testing"
)

func TestAllocatorHandsOutEachAddressOnceUntilExhausted(t *testing.T) {
	a := NewAllocator(netip.MustParsePrefix("243.1.0.0/29"))
	seen := map[netip.Addr]bool{}
	for i := 0; i < 7; i++ {
		ip, err := a.Allocate()
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if seen[ip] || ip == netip.MustParseAddr("243.1.0.0") || !a.Contains(ip) {
			t.Fatalf("allocation %d gave %s", i, ip)
		}
		seen[ip] = true
	}
	if _, err := a.Allocate(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("allocating from a full block: %v, want ErrExhausted", err)
	}
	a.Release(netip.MustParseAddr("243.1.0.3"))
	if ip, err := a.Allocate(); err != nil || ip != netip.MustParseAddr("243.1.0.3") {
		t.Fatalf("after release got %s, %v", ip, err)
	}
}

func TestReservedAddressesAreSkippedAndForeignOnesRefused(t *testing.T) {
	a := NewAllocator(netip.MustParsePrefix("243.1.0.0/16"))
	if !a.Reserve(netip.MustParseAddr("243.1.0.1")) {
		t.Fatal("reserving an address of the block failed")
	}
	if a.Reserve(netip.MustParseAddr("243.2.0.1")) {
		t.Fatal("reserved an address of another block")
	}
	ip, err := a.Allocate()
	if err != nil || ip != netip.MustParseAddr("243.1.0.2") {
		t.Fatalf("first allocation after a reservation = %s, %v", ip, err)
	}
}

func TestIPv6Blocks(t *testing.T) {
	a := NewAllocator(netip.MustParsePrefix("fd7a:6d63:7364:1::/64"))
	ip, err := a.Allocate()
	if err != nil || ip != netip.MustParseAddr("fd7a:6d63:7364:1::1") {
		t.Fatalf("got %s, %v", ip, err)
	}
}

func TestBlocksOfOneAddressHandOutNothingOutsideThem(t *testing.T) {
	for _, block := range []string{"243.1.2.3/32", "fd00::1/128"} {
		a := NewAllocator(netip.MustParsePrefix(block))
		if ip, err := a.Allocate(); err == nil {
			t.Errorf("%s: allocated %s, want exhausted (the block's only address is its first)", block, ip)
		}
	}
	a := NewAllocator(netip.MustParsePrefix("243.1.2.2/31"))
	ip, err := a.Allocate()
	if err != nil || ip != netip.MustParseAddr("243.1.2.3") {
		t.Fatalf("/31: Allocate = %v, %v; want 243.1.2.3", ip, err)
	}
	if ip, err := a.Allocate(); err == nil {
		t.Errorf("/31: a second address %s, want exhausted", ip)
	}
}
