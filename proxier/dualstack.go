package proxier

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// DualStack runs one [Proxier] per IP family behind one set of event
// handlers: each family programs its own table ("ip mcsd", "ip6 mcsd"), or
// in iptables mode its own chains in iptables and ip6tables, from the
// ClusterSetIP and EndpointSlices of its family.
type DualStack struct {
	ipv4, ipv6 *Proxier
}

var _ Provider = (*DualStack)(nil)

// NewDualStack returns a proxier for both families from one Config, as
// [New] prepares the host for one. Each family gets its own kernel
// interface, made on this host through cfg.InNetns: cfg's IPFamily is
// ignored, and its NFTables and IPTables must be nil. The two proxiers
// share cfg's Conntrack, RuleCounter, Registerer (metrics carry an
// ip_family label) and Health.
func NewDualStack(cfg Config) (*DualStack, error) {
	if cfg.NFTables != nil || cfg.IPTables != nil {
		return nil, fmt.Errorf("proxier: a dual-stack proxier makes each family's nftables or iptables; give a family's own to New")
	}
	cfg, err := prepareHost(cfg)
	if err != nil {
		return nil, err
	}
	cfg4, cfg6 := cfg, cfg
	cfg4.IPFamily, cfg6.IPFamily = v1.IPv4Protocol, v1.IPv6Protocol
	p4, err := newProxier(cfg4)
	if err != nil {
		return nil, err
	}
	p6, err := newProxier(cfg6)
	if err != nil {
		return nil, err
	}
	return &DualStack{ipv4: p4, ipv6: p6}, nil
}

// Mode is the mode both proxiers run in: nftables or iptables, never auto.
func (d *DualStack) Mode() Mode { return d.ipv4.Mode() }

// OnServiceImportAdd implements [Provider].
func (d *DualStack) OnServiceImportAdd(si *mcsv1beta1.ServiceImport) {
	d.ipv4.OnServiceImportAdd(si)
	d.ipv6.OnServiceImportAdd(si)
}

// OnServiceImportUpdate implements [Provider].
func (d *DualStack) OnServiceImportUpdate(old, si *mcsv1beta1.ServiceImport) {
	d.ipv4.OnServiceImportUpdate(old, si)
	d.ipv6.OnServiceImportUpdate(old, si)
}

// OnServiceImportDelete implements [Provider].
func (d *DualStack) OnServiceImportDelete(si *mcsv1beta1.ServiceImport) {
	d.ipv4.OnServiceImportDelete(si)
	d.ipv6.OnServiceImportDelete(si)
}

// OnServiceImportsSynced implements [Provider].
func (d *DualStack) OnServiceImportsSynced() {
	d.ipv4.OnServiceImportsSynced()
	d.ipv6.OnServiceImportsSynced()
}

// OnEndpointSliceAdd implements [Provider]; each slice goes to the proxier
// of its address type.
func (d *DualStack) OnEndpointSliceAdd(slice *discoveryv1.EndpointSlice) {
	d.forSlice(slice).OnEndpointSliceAdd(slice)
}

// OnEndpointSliceUpdate implements [Provider].
func (d *DualStack) OnEndpointSliceUpdate(old, slice *discoveryv1.EndpointSlice) {
	d.forSlice(slice).OnEndpointSliceUpdate(old, slice)
}

// OnEndpointSliceDelete implements [Provider].
func (d *DualStack) OnEndpointSliceDelete(slice *discoveryv1.EndpointSlice) {
	d.forSlice(slice).OnEndpointSliceDelete(slice)
}

// OnEndpointSlicesSynced implements [Provider].
func (d *DualStack) OnEndpointSlicesSynced() {
	d.ipv4.OnEndpointSlicesSynced()
	d.ipv6.OnEndpointSlicesSynced()
}

func (d *DualStack) forSlice(slice *discoveryv1.EndpointSlice) *Proxier {
	if slice.AddressType == discoveryv1.AddressTypeIPv6 {
		return d.ipv6
	}
	return d.ipv4
}

// Sync implements [Provider].
func (d *DualStack) Sync() {
	d.ipv4.Sync()
	d.ipv6.Sync()
}

// SyncLoop implements [Provider]: it runs both families' loops until ctx is
// done.
func (d *DualStack) SyncLoop(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range []*Proxier{d.ipv4, d.ipv6} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.SyncLoop(ctx)
		}()
	}
	wg.Wait()
}
