// NewRecorder gives mcsd's controllers an EventRecorder that knows the
// mcs-api kinds, so events land on ServiceExports and ServiceImports.

package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	kuberecord "k8s.io/client-go/tools/record"
	mcsscheme "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/scheme"
)

// NewRecorder returns a recorder that writes events for component through
// kube, and a function that stops it and flushes nothing further.
func NewRecorder(kube kubernetes.Interface, component string) (kuberecord.EventRecorder, func()) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = mcsscheme.AddToScheme(scheme)
	b := kuberecord.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(scheme, corev1.EventSource{Component: component}), b.Shutdown
}
