package dnsgate

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// DefaultMaxSummaryPending caps the summary's Pending list; beyond it the
// summary lists nothing and says Through "": every new ClusterSetIP is held
// back until the backlog drains.
const DefaultMaxSummaryPending = 4 * DefaultMaxPending

// writeRetry is the wait before writing the summary again after a failure.
const writeRetry = time.Second

// AggregatorConfig says where the reports are and where the summary goes.
type AggregatorConfig struct {
	// Client watches the reports and the node agents' pods, and writes
	// the summary.
	Client kubernetes.Interface
	// Namespace holds the reports, the node agents' pods and the summary
	// (mcsd's own).
	Namespace string
	// PeerPods is the label selector of the node agents' pods: a node's
	// report counts while a pod of it on that node is Ready.
	PeerPods string
	// Holder names the writer on the summary Lease (the controller's
	// replica).
	Holder string
	// Writing paces the summary's writes and caps its Pending list
	// (default DefaultMaxSummaryPending).
	Writing
}

// Aggregator folds every node's report into the cluster's summary, the one
// Lease each node's gate watches.
type Aggregator struct {
	cfg     AggregatorConfig
	leases  informers.SharedInformerFactory
	pods    informers.SharedInformerFactory
	publish chan struct{}

	mu sync.Mutex
	// reports are the nodes' reports by Lease name; readyPods are the
	// Ready node-agent pods by node.
	reports   map[string]*nodeReport
	readyPods map[string]map[string]bool
}

type nodeReport struct {
	node   string
	report Report
}

// NewAggregator returns an aggregator; Run starts it.
func NewAggregator(cfg AggregatorConfig) (*Aggregator, error) {
	if cfg.Client == nil || cfg.Namespace == "" {
		return nil, fmt.Errorf("dnsgate: the aggregator needs a client and a namespace")
	}
	if cfg.PeerPods == "" {
		cfg.PeerPods = DefaultPeerPods
	}
	if _, err := labels.Parse(cfg.PeerPods); err != nil {
		return nil, fmt.Errorf("dnsgate: the node agents' pod selector %q: %w", cfg.PeerPods, err)
	}
	cfg.Writing = cfg.Writing.withDefaults(DefaultMaxSummaryPending, "dnsgate-aggregator")
	a := &Aggregator{cfg: cfg, publish: make(chan struct{}, 1), reports: map[string]*nodeReport{}, readyPods: map[string]map[string]bool{}}
	a.leases = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{LabelComponent: ComponentNodeReport}).String()
		}))
	if _, err := a.leases.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.setReport(obj) },
		UpdateFunc: func(_, obj any) { a.setReport(obj) },
		DeleteFunc: a.deleteReport,
	}); err != nil {
		return nil, err
	}
	a.pods = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cfg.PeerPods }))
	if _, err := a.pods.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.setPod(obj) },
		UpdateFunc: func(_, obj any) { a.setPod(obj) },
		DeleteFunc: a.deletePod,
	}); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Aggregator) changed() {
	select {
	case a.publish <- struct{}{}:
	default:
	}
}

func (a *Aggregator) setReport(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Spec.HolderIdentity == nil || l.Labels[LabelComponent] != ComponentNodeReport {
		return
	}
	a.mu.Lock()
	a.reports[l.Name] = &nodeReport{node: *l.Spec.HolderIdentity, report: reportOf(l)}
	a.mu.Unlock()
	a.changed()
}

func (a *Aggregator) deleteReport(obj any) {
	l, ok := deleted[*coordinationv1.Lease](obj)
	if !ok {
		return
	}
	a.mu.Lock()
	delete(a.reports, l.Name)
	a.mu.Unlock()
	a.changed()
}

// setPod notes whether a node agent's pod is Ready on its node.
func (a *Aggregator) setPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	a.mu.Lock()
	if podReady(pod) {
		if a.readyPods[pod.Spec.NodeName] == nil {
			a.readyPods[pod.Spec.NodeName] = map[string]bool{}
		}
		a.readyPods[pod.Spec.NodeName][pod.Name] = true
	} else {
		a.forgetPod(pod)
	}
	a.mu.Unlock()
	a.changed()
}

func (a *Aggregator) deletePod(obj any) {
	pod, ok := deleted[*corev1.Pod](obj)
	if !ok {
		return
	}
	a.mu.Lock()
	a.forgetPod(pod)
	a.mu.Unlock()
	a.changed()
}

// forgetPod drops a pod from the Ready ones. a.mu must be held.
func (a *Aggregator) forgetPod(pod *corev1.Pod) {
	delete(a.readyPods[pod.Spec.NodeName], pod.Name)
	if len(a.readyPods[pod.Spec.NodeName]) == 0 {
		delete(a.readyPods, pod.Spec.NodeName)
	}
}

// Summary is what the live nodes' reports say together now.
func (a *Aggregator) Summary() Summary {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Summary{Asks: true}
	pending := map[netip.Addr]bool{}
	for _, r := range a.reports {
		if len(a.readyPods[r.node]) == 0 {
			continue
		}
		if s.LiveNodes == 0 {
			s.Through = r.report.Through
		} else if s.Through != "" {
			switch c, err := resourceversion.CompareResourceVersion(r.report.Through, s.Through); {
			case r.report.Through == "":
				s.Through = ""
			case err != nil:
				s.Orderless = true
			case c < 0:
				s.Through = r.report.Through
			}
		}
		if !r.report.knowsWanted {
			s.Asks = false
		}
		if aw := r.report.Awaiting; aw != "" {
			switch c, err := resourceversion.CompareResourceVersion(aw, s.Wanted); {
			case s.Wanted == "":
				s.Wanted = aw
			case err != nil:
				s.Orderless = true
			case c > 0:
				s.Wanted = aw
			}
		}
		s.LiveNodes++
		for _, p := range r.report.Pending {
			pending[p] = true
		}
	}
	if s.Orderless || !s.Asks {
		s.Wanted = ""
	}
	if s.Orderless {
		s.Through, pending = "", nil
	}
	if len(pending) > a.cfg.MaxPending {
		// Too many to list: hold back every new ClusterSetIP rather than
		// name a part of them.
		s.Through, pending = "", nil
	}
	for p := range pending {
		s.Pending = append(s.Pending, p)
	}
	slices.SortFunc(s.Pending, func(x, y netip.Addr) int { return x.Compare(y) })
	return s
}

// Run watches the reports and the node agents' pods and writes the summary
// each time it changes, at most every MinWrite, until ctx ends. It writes
// nothing before both are listed: a summary of no node would release every
// ClusterSetIP.
func (a *Aggregator) Run(ctx context.Context) {
	a.leases.Start(ctx.Done())
	a.pods.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.leases.Coordination().V1().Leases().Informer().HasSynced, a.pods.Core().V1().Pods().Informer().HasSynced) {
		return
	}
	a.changed()
	w := &leaseWriter{client: a.cfg.Client, namespace: a.cfg.Namespace, name: SummaryLeaseName, holder: a.cfg.Holder, component: ComponentSummary, clock: a.cfg.Clock}
	var last *Summary
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.publish:
		}
		delay := a.cfg.MinWrite
		if s := a.Summary(); last == nil || !s.equal(*last) {
			if err := w.write(ctx, s.annotate); err != nil {
				a.cfg.Logger.Error(err, "Writing the summary of the nodes' data-plane reports; every node's DNS holds back new ClusterSetIPs until it is written", "lease", klog.KRef(a.cfg.Namespace, SummaryLeaseName))
				delay = writeRetry
				a.changed()
			} else {
				last = &s
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-a.cfg.Clock.After(delay):
		}
	}
}
