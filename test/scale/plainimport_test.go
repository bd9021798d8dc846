package scale

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/mcsslice"
	"github.com/mcsd-io/mcsd/test/lib/fixture"
)

// plainSliceLabels are an MCS EndpointSlice's labels under another
// manager's name: the data plane reads the slice, the importers, which
// delete what they manage and no record backs, leave it alone.
func plainSliceLabels(name, cluster string) map[string]string {
	l := mcsslice.Labels(name, cluster)
	l[discoveryv1.LabelManagedBy] = "plain-writer.bench.mcsd.io"
	return l
}

// plainImport makes the importer's writes of one service in m: its
// ServiceImport, then its status naming every cluster of endpoints and one
// EndpointSlice per cluster (owned by the ServiceImport), the status and
// the slices together and the slices 4 at a time, as the importer does.
// member names m in errors.
func plainImport(ctx context.Context, m clientsOf, member, ns, name, vip string, endpoints map[string][]string, ports []mcsv1beta1.ServicePort) error {
	si, err := m.mcs.MulticlusterV1beta1().ServiceImports(ns).Create(ctx, &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, IPs: []string{vip}, Ports: ports,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating ServiceImport %s/%s in %s: %w", ns, name, member, err)
	}
	clusters := slices.Sorted(maps.Keys(endpoints))
	statusDone := make(chan error, 1)
	go func() {
		upd := si.DeepCopy()
		for _, c := range clusters {
			upd.Status.Clusters = append(upd.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: c})
		}
		_, err := m.mcs.MulticlusterV1beta1().ServiceImports(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		statusDone <- err
	}()
	sliceErr := fixture.InParallel(ctx, 4, len(clusters), func(ctx context.Context, i int) error {
		cluster := clusters[i]
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns,
				Name:      mcsslice.Name(name, cluster, discoveryv1.AddressTypeIPv4, 0),
				Labels:    plainSliceLabels(name, cluster),
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: mcsv1beta1.GroupVersion.String(), Kind: "ServiceImport", Name: name, UID: si.UID,
				}},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		}
		for _, addr := range endpoints[cluster] {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{addr},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			})
		}
		_, err := m.kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
		return err
	})
	return errors.Join(sliceErr, <-statusDone)
}
