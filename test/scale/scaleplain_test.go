package scale

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/lib/fixture"
)

func plainNamespaceOf(i int) string { return fmt.Sprintf("plain-%02d", i%namespaces) }

// plainImportAll makes the writes of importing the scenario in m without
// mcsd — every service's ServiceImport, status and one EndpointSlice per
// cluster, 4 services at a time as the importer's default workers, with
// mcsd's client limits — in namespaces of their own, and returns how long
// they took. It then deletes what it wrote, so that mcsd, started after,
// neither reads nor caches it.
func plainImportAll(ctx context.Context, m *fixture.Member, sc scenario, clusters []string) (time.Duration, error) {
	client := daemonClients(m.Config)
	for i := range namespaces {
		if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: plainNamespaceOf(i)}}, metav1.CreateOptions{}); err != nil {
			return 0, err
		}
	}
	ports := []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	began := time.Now()
	err := fixture.InParallel(ctx, 4, sc.services, func(ctx context.Context, i int) error {
		endpoints := map[string][]string{}
		for ci, c := range clusters {
			endpoints[c] = sc.service(i, ci).Endpoints
		}
		return plainImport(ctx, client, m.ID, plainNamespaceOf(i), fmt.Sprintf("svc-%05d", i), vipOf(i).String(), endpoints, ports)
	})
	took := time.Since(began)
	if err != nil {
		return 0, fmt.Errorf("plain writer: %w", err)
	}
	// Gone before mcsd starts: the slices by collection (they are owned,
	// but the garbage collector would take its time), then the imports and
	// the namespaces.
	for i := range namespaces {
		ns := plainNamespaceOf(i)
		if err := m.Kube.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return 0, err
		}
		if err := m.MCS.MulticlusterV1beta1().ServiceImports(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return 0, err
		}
	}
	if err := deleteNamespaces(ctx, m.Kube, plainNamespaceOf); err != nil {
		return 0, fmt.Errorf("the plain writer's objects: %w", err)
	}
	return took, nil
}
