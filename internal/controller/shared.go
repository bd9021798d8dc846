package controller

import (
	"errors"

	"k8s.io/client-go/kubernetes"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/internal/record"
)

// Shared is what every controller of one cluster is built with: who it is,
// where the broker keeps the records, the clients it writes through, where
// its Events go and what time it is. The daemon gives each controller its
// own clients (their rate limiters apart, so that one's burst never delays
// another), with the rest the same.
type Shared struct {
	// ClusterID is this cluster's ID.
	ClusterID string
	// BrokerNamespace is the broker namespace: the claims, declarations
	// and export rules are there, and each member's namespace is named
	// after it (MemberNamespace).
	BrokerNamespace string

	// Local and LocalMCS write to this cluster; Broker and BrokerMCS to
	// the broker. A controller uses those it needs.
	Local     kubernetes.Interface
	LocalMCS  mcsclient.Interface
	Broker    kubernetes.Interface
	BrokerMCS mcsclient.Interface

	// Recorder gets an Event for every change a user would want to see
	// (nil: events are dropped).
	Recorder kuberecord.EventRecorder
	// Clock measures time: backoffs, Lease ages, timers (nil: the real
	// clock).
	Clock clock.WithTicker
	// Workers is the number of keys synced at once (default 4).
	Workers int
	// Logger is what the controller logs with where no context carries
	// one: its event handlers, and what it is told from outside (nil sink:
	// klog.Background()). A controller adds its name.
	Logger klog.Logger
}

// DefaultWorkers is Shared.Workers when it is not set.
const DefaultWorkers = 4

// WithDefaults returns s with its defaults filled in, or an error when an
// identity it cannot do without is missing.
func (s Shared) WithDefaults() (Shared, error) {
	if s.ClusterID == "" || s.BrokerNamespace == "" {
		return s, errors.New("cluster ID and broker namespace are required")
	}
	if s.Recorder == nil {
		s.Recorder = &kuberecord.FakeRecorder{}
	}
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	if s.Workers <= 0 {
		s.Workers = DefaultWorkers
	}
	if s.Logger.GetSink() == nil {
		s.Logger = klog.Background()
	}
	return s, nil
}

// MemberNamespace is the broker namespace in which this cluster writes its
// records, EndpointSlices and heartbeat Lease (record.MemberNamespace).
func (s Shared) MemberNamespace() string {
	return record.MemberNamespace(s.BrokerNamespace, s.ClusterID)
}
