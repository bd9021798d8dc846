// Package liveness owns the clusterset's liveness as one member cluster sees
// it: which clusters are live or gone (their broker Lease was not renewed
// within the TTL), whose records still count in merges, and whether the
// broker answers. Its Controller follows every cluster's heartbeat Lease on
// the broker and probes the broker, decides each cluster's transitions, and
// publishes them in the cluster as one ConfigMap; the importer asks it and
// is told of every transition.
//
// The ConfigMap is the one vocabulary of liveness: a cluster is Live or
// Gone, and the broker reachable or not. It exists so that a cluster's
// death costs one write, not one per service: the node's data plane (mcsd's
// DNS server and proxier, or a CNI embedding the proxier) follows it with a
// Watcher and stops serving a gone cluster's endpoints
// (mcsslice.GoneClusters) as soon as it says so, while the importer removes
// that cluster's EndpointSlices and status entries afterwards at a bounded
// rate; kubectl mcs status reads it too, so the operator sees what the
// nodes do.
package liveness

import (
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/mcsd-io/mcsd/mcsslice"
)

// ConfigMapName is the name of the ConfigMap, in the namespace mcsd runs
// in (--leader-elect-namespace of the daemon; DefaultNamespace).
const ConfigMapName = "mcsd-clusterset-liveness"

// Values of a cluster's key in the ConfigMap's data.
const (
	// Live: the cluster's Lease is renewed; its endpoints are served.
	Live = "Live"
	// Gone: the cluster's Lease was not renewed within the TTL, or was
	// deleted; its endpoints are not served until it renews again.
	Gone = "Gone"
	// Unknown is never written: it is what a reader says of a cluster the
	// ConfigMap does not name (no Lease or record of it was seen), or of
	// every cluster when there is no ConfigMap (no importer runs).
	Unknown = "Unknown"
)

// Annotations of the ConfigMap about the broker.
const (
	// AnnotationBrokerReachable is "true" while the broker answers and
	// "false" while it does not; nothing is dropped then.
	AnnotationBrokerReachable = "mcsd.io/broker-reachable"
	// AnnotationBrokerLastContact is when the broker last answered
	// (RFC 3339), set while it does not.
	AnnotationBrokerLastContact = "mcsd.io/broker-last-contact"
)

// State is what the ConfigMap says.
type State struct {
	// Clusters maps every cluster the controller knows of to Live or Gone.
	Clusters map[string]string
	// BrokerReachable, and when it last answered if it does not.
	BrokerReachable   bool
	BrokerLastContact time.Time
}

// Of returns what the state says of cluster: Live, Gone or Unknown.
func (s State) Of(cluster string) string {
	if v, ok := s.Clusters[cluster]; ok {
		return v
	}
	return Unknown
}

// GoneClusters returns the clusters the state says are gone.
func (s State) GoneClusters() mcsslice.GoneClusters {
	var gone []string
	for cluster, v := range s.Clusters {
		if v == Gone {
			gone = append(gone, cluster)
		}
	}
	return mcsslice.NewGoneClusters(gone...)
}

// Apply writes the state into cm's data and annotations and reports
// whether anything changed. Data and annotations of others are kept, but
// a cluster the state no longer names is removed.
func (s State) Apply(cm *corev1.ConfigMap) bool {
	want := maps.Clone(s.Clusters)
	if want == nil {
		want = map[string]string{}
	}
	changed := !maps.Equal(cm.Data, want)
	cm.Data = want
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	set := func(k, v string) {
		if v == "" {
			if _, ok := cm.Annotations[k]; ok {
				delete(cm.Annotations, k)
				changed = true
			}
			return
		}
		if cm.Annotations[k] != v {
			cm.Annotations[k] = v
			changed = true
		}
	}
	if s.BrokerReachable {
		set(AnnotationBrokerReachable, "true")
		set(AnnotationBrokerLastContact, "")
	} else {
		set(AnnotationBrokerReachable, "false")
		set(AnnotationBrokerLastContact, s.BrokerLastContact.UTC().Format(time.RFC3339))
	}
	return changed
}

// Read decodes a ConfigMap; nil is an empty state with the broker reachable.
// Values other than Live and Gone are read as Live: an unknown word must not
// take a cluster's endpoints away.
func Read(cm *corev1.ConfigMap) State {
	s := State{Clusters: map[string]string{}, BrokerReachable: true}
	if cm == nil {
		return s
	}
	for cluster, v := range cm.Data {
		if strings.TrimSpace(v) == Gone {
			s.Clusters[cluster] = Gone
		} else {
			s.Clusters[cluster] = Live
		}
	}
	if cm.Annotations[AnnotationBrokerReachable] == "false" {
		s.BrokerReachable = false
		s.BrokerLastContact, _ = time.Parse(time.RFC3339, cm.Annotations[AnnotationBrokerLastContact])
	}
	return s
}
