package proxier

import (
	"net/netip"
	"sync/atomic"
	"time"
)

// settleTimeout is how long a committed ClusterSetIP whose service has no
// EndpointSlice of this family yet waits for one before it is reported
// carried anyway (its rules then reject). The importer writes a service's
// slices right after its ServiceImport, so they normally arrive within
// one sync or two; reporting the ClusterSetIP before them would let a
// client that resolves and connects at once be refused.
const settleTimeout = 10 * time.Second

// vipReport is the proxier's account, for its VIPObserver, of which
// ClusterSetIPs its committed rules carry. Guarded by the proxier's mutex.
type vipReport struct {
	observer VIPObserver
	// committed counts the committed services of each ClusterSetIP (more
	// than one only while imports conflict).
	committed map[string]int
	// reported are the ClusterSetIPs the observer was told are carried.
	reported map[string]bool
	// unsettled are committed ClusterSetIPs not reported yet, with when
	// they were first committed.
	unsettled map[string]time.Time
	// touched are the ClusterSetIPs whose committed services changed
	// since the last report.
	touched map[string]bool
	// first is false until the first report, made even if empty.
	first bool
	// waking is set while a timer will ask for a sync to settle
	// ClusterSetIPs by time.
	waking atomic.Bool
}

func newVIPReport(observer VIPObserver) vipReport {
	return vipReport{
		observer:  observer,
		committed: map[string]int{},
		reported:  map[string]bool{},
		unsettled: map[string]time.Time{},
		touched:   map[string]bool{},
	}
}

// carry counts a service's newly committed rules.
func (p *Proxier) carry(r *renderedService) {
	if r != nil {
		p.vips.committed[r.vip]++
		p.vips.touched[r.vip] = true
	}
}

// uncarry undoes carry for a service's previously committed rules.
func (p *Proxier) uncarry(r *renderedService) {
	if r == nil {
		return
	}
	if p.vips.committed[r.vip]--; p.vips.committed[r.vip] <= 0 {
		delete(p.vips.committed, r.vip)
	}
	p.vips.touched[r.vip] = true
}

// settled says whether a committed ClusterSetIP may be reported carried:
// its service has an EndpointSlice of this family (its endpoints, possibly
// none, are programmed), or it has waited settleTimeout for one.
func (p *Proxier) settled(vip string, since, now time.Time) bool {
	owner, ok := p.vipOwner(vip)
	return (ok && len(p.slices[owner]) > 0) || now.Sub(since) >= settleTimeout
}

// reportVIPs tells the VIPObserver, after a sync, which ClusterSetIPs
// became carried and which stopped being carried. It runs after every
// successful sync, so an unsettled ClusterSetIP is reported by the first
// sync after it settles; a timer asks for that sync when only time can
// settle it.
func (p *Proxier) reportVIPs() {
	v := &p.vips
	if v.observer == nil {
		clear(v.touched)
		return
	}
	now := p.clock.Now()
	var added, removed []netip.Addr
	for vip := range v.touched {
		if v.committed[vip] == 0 {
			delete(v.unsettled, vip)
			if v.reported[vip] {
				delete(v.reported, vip)
				removed = appendAddr(removed, vip)
			}
		} else if !v.reported[vip] {
			if _, ok := v.unsettled[vip]; !ok {
				v.unsettled[vip] = now
			}
		}
	}
	clear(v.touched)
	for vip, since := range v.unsettled {
		if p.settled(vip, since, now) {
			delete(v.unsettled, vip)
			v.reported[vip] = true
			added = appendAddr(added, vip)
		}
	}
	if len(v.unsettled) > 0 && v.waking.CompareAndSwap(false, true) {
		go func() {
			<-p.clock.After(settleTimeout)
			v.waking.Store(false)
			p.runner.Run()
		}()
	}
	if len(added) == 0 && len(removed) == 0 && v.first {
		return
	}
	v.first = true
	v.observer.VIPsProgrammed(p.family, added, removed)
}

func appendAddr(addrs []netip.Addr, s string) []netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil {
		addrs = append(addrs, a)
	}
	return addrs
}
