package main

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	kuberecord "k8s.io/client-go/tools/record"

	"github.com/mcsd-io/mcsd/internal/version"
)

// The reasons of the node agent's events on its Node.
const (
	EventNodeAgentStarting    = "Starting"
	EventSyncProxyRulesFailed = "SyncProxyRulesFailed"
)

// maxEventMessage bounds an event's message: an nft or iptables-restore
// error may quote much of its input.
const maxEventMessage = 1024

// nodeEvents records the node agent's events on its Node, as kube-proxy
// records its own (a reference by name, the UID being the name, so no read
// of the Node is needed): where `kubectl describe node` shows them beside
// the kubelet's. The broadcaster's correlator folds repeats of one failure
// into a count.
type nodeEvents struct {
	recorder kuberecord.EventRecorder
	node     *corev1.ObjectReference
	stop     func()
}

func newNodeEvents(kube kubernetes.Interface, nodeName string) *nodeEvents {
	b := kuberecord.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return &nodeEvents{
		recorder: b.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: "mcsd-node-agent", Host: nodeName}),
		node:     &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)},
		stop:     b.Shutdown,
	}
}

// starting records that the node agent starts, with what.
func (e *nodeEvents) starting(components []string, proxierMode string) {
	msg := fmt.Sprintf("mcsd %s node agent starting: %v", version.Get().Version, components)
	if proxierMode != "" {
		msg += ", proxier in " + proxierMode + " mode"
	}
	e.recorder.Event(e.node, corev1.EventTypeNormal, EventNodeAgentStarting, msg)
}

// syncFailed records that the kernel refused a sync of the proxier's
// rules (proxier.Config.SyncFailed).
func (e *nodeEvents) syncFailed(family corev1.IPFamily, err error) {
	msg := fmt.Sprintf("%s ClusterSetIP rules not synced: %v", family, err)
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage-3] + "..."
	}
	e.recorder.Event(e.node, corev1.EventTypeWarning, EventSyncProxyRulesFailed, msg)
}
