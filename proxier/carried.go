package proxier

import (
	"net/netip"
)

// carry counts a committed service's ClusterSetIP and notes it as touched.
func (p *Proxier) carry(r *renderedService, touched map[string]bool) {
	if r != nil {
		p.carried[r.vip]++
		touched[r.vip] = true
	}
}

// uncarry undoes carry for a service's previously committed rules.
func (p *Proxier) uncarry(r *renderedService, touched map[string]bool) {
	if r == nil {
		return
	}
	if p.carried[r.vip]--; p.carried[r.vip] <= 0 {
		delete(p.carried, r.vip)
	}
	touched[r.vip] = true
}

// reportVIPs tells the VIPObserver, for each ClusterSetIP a committed sync
// touched, whether it is carried now. A ClusterSetIP that only moved from
// one import to another is reported carried again, which is harmless.
func (p *Proxier) reportVIPs(touched map[string]bool) {
	if p.vipObserver == nil || (len(touched) == 0 && p.vipsReported) {
		return
	}
	var added, removed []netip.Addr
	for vip := range touched {
		a, err := netip.ParseAddr(vip)
		if err != nil {
			continue
		}
		if p.carried[vip] > 0 {
			added = append(added, a)
		} else {
			removed = append(removed, a)
		}
	}
	p.vipsReported = true
	p.vipObserver.VIPsProgrammed(p.family, added, removed)
}
