package main

import (
	"errors"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/mcsd-io/mcsd/broker"
)

// EventClusterSetRangesChanged is the reason of the event a running
// controller records when the broker's clusterset ranges change under it.
const EventClusterSetRangesChanged = "ClusterSetRangesChanged"

// rangesWithBroker are the clusterset ranges the controllers run with: the
// broker's settings s. A flag given must repeat them (--clusterset-cidrs
// may leave a family out, for a member that serves only the other); DNS
// and the proxier of this process, which start before the broker is read,
// must run with them too. Each error names the flag, its value, the
// broker's ranges and the settings object.
func (o *options) rangesWithBroker(s broker.Settings) (broker.Ranges, error) {
	want := s.Ranges()
	where := s.Namespace + "/" + broker.SettingsName
	var errs flagErrors
	disagrees := func(flagName, value string) {
		errs.bad(flagName, "%s disagrees with the broker's settings %s (%s): leave the flag out to take the broker's, or have the broker's administrator change them (README, \"Changing the clusterset ranges\")",
			value, where, want)
	}
	switch {
	case o.givenRanges.cidrs:
		for _, p := range o.clusterSetCIDRs {
			if b, _ := want.CIDR(p.Addr().Is4()); b != p {
				disagrees("clusterset-cidrs", joinPrefixes(o.clusterSetCIDRs))
				break
			}
		}
		want.CIDRs = o.clusterSetCIDRs
	case (o.runs(componentDNS) || o.runs(componentProxier)) && !slices.Equal(o.clusterSetCIDRs, want.CIDRs):
		errs.bad("clusterset-cidrs", "DNS and the proxier of this process run with the default %s, which the broker's settings %s do not have (%s): give --clusterset-cidrs=%s",
			joinPrefixes(o.clusterSetCIDRs), where, want, joinPrefixes(want.CIDRs))
	}
	if o.givenRanges.blockBitsV4 && o.vipBlockBitsV4 != want.BlockBitsV4 {
		disagrees("vip-block-bits-ipv4", strconv.Itoa(o.vipBlockBitsV4))
	}
	if o.givenRanges.blockBitsV6 && o.vipBlockBitsV6 != want.BlockBitsV6 {
		disagrees("vip-block-bits-ipv6", strconv.Itoa(o.vipBlockBitsV6))
	}
	if err := vipBlocksInside(o.clusterVIPCIDRs, want.CIDRs); err != nil {
		errs.bad("cluster-vip-cidrs", "%v of the broker's settings %s", err, where)
	}
	if len(errs) > 0 {
		return broker.Ranges{}, errors.Join(errs...)
	}
	return want, nil
}

// rangesWatch tells the operator when the broker's clusterset ranges
// change while the controllers run with others: an event and a log line
// naming both. The controllers keep their ranges, blocks and VIPs: moving
// them is the administrator's procedure (README, "Changing the clusterset
// ranges"), which ends with restarting mcsd.
type rangesWatch struct {
	running  broker.Ranges
	recorder kuberecord.EventRecorder
	logger   klog.Logger
	// object is what the events are about.
	object func() runtime.Object

	mu sync.Mutex
	// reported is the last broker ranges told of, so that a resync does
	// not repeat it.
	reported string
}

// observe is the handler of the broker's settings ConfigMap.
func (w *rangesWatch) observe(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	s, err := broker.ParseSettings(cm)
	if err != nil {
		w.logger.Error(err, "Ignoring the broker's settings", "settings", klog.KObj(cm))
		return
	}
	now := s.Ranges()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running.Agrees(now) || now.String() == w.reported {
		return
	}
	w.reported = now.String()
	w.logger.Info("The broker's clusterset ranges changed; keeping the ranges, blocks and ClusterSetIPs this cluster runs with until mcsd restarts",
		"settings", klog.KObj(cm), "broker", now.String(), "running", w.running.String())
	w.recorder.Eventf(w.object(), corev1.EventTypeWarning, EventClusterSetRangesChanged,
		"The broker's settings %s/%s now say %s; this cluster keeps running with %s, its blocks and ClusterSetIPs until mcsd restarts (README, \"Changing the clusterset ranges\")",
		cm.Namespace, cm.Name, now, w.running)
}
