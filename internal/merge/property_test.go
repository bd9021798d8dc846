package merge

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
)

// TestTheSameExportsInAnyOrderMergeAlike is the property every cluster
// relies on: whichever order a cluster's cache lists the exports in, it
// derives the same service and the same verdicts as every other cluster.
func TestTheSameExportsInAnyOrderMergeAlike(t *testing.T) {
	scenarios := map[string][]record.Export{
		"five clusters of which two are headless and one has an extra port": {
			export("c1", 0, vips("243.1.0.1")),
			export("c2", 1, headless),
			export("c3", 2, ports(port("http", 80, corev1.ProtocolTCP), port("admin", 9000, corev1.ProtocolTCP))),
			export("c4", 3, headless),
			export("c5", 4, vips("243.5.0.1")),
		},
		"four clusters created in the same second, each with its own conflict": {
			export("d", 0, clientIP(60)),
			export("b", 0, families(v4, v6), vips("243.2.0.1", "fd7a:6d63:7364:2::1")),
			export("c", 0, vipsOff),
			export("a", 0, families(v6, v4), ports(port("http", 8080, corev1.ProtocolTCP))),
		},
		"five clusters fighting over port names and numbers": {
			export("e1", 5, ports(port("http", 80, corev1.ProtocolTCP), port("grpc", 9090, corev1.ProtocolTCP))),
			export("e2", 4, ports(port("web", 80, corev1.ProtocolTCP), port("grpc", 9091, corev1.ProtocolTCP))),
			export("e3", 3, ports(port("dns", 53, corev1.ProtocolUDP), port("dns-tcp", 53, corev1.ProtocolTCP))),
			export("e4", 3, ports(port("dns", 53, corev1.ProtocolTCP))),
			export("e5", 9, ports()),
		},
		"four clusters with no IP family in common": {
			export("east", 2, families(v6), vips("fd7a:6d63:7364:1::1")),
			export("west", 1, families(v4), vips("243.2.0.1")),
			export("north", 1, families(v4), func(e *record.Export) { e.ExportedLabels = map[string]string{"x": "y"} }),
			export("south", 3, headless, families(v4, v6)),
		},
	}
	for name, records := range scenarios {
		t.Run(name, func(t *testing.T) {
			checkEveryOrder(t, records)
		})
	}

	t.Run("random exports of four or five clusters", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1645, 2149))
		seen := map[mcsv1beta1.ServiceExportConditionReason]int{}
		for i := range 200 {
			records := randomExports(rng, 4+rng.IntN(2))
			if i%5 == 0 {
				// Some sets agree on everything but who and when.
				for j := 1; j < len(records); j++ {
					agreeing := records[0].DeepCopy()
					agreeing.Cluster, agreeing.Created, agreeing.VIPs = records[j].Cluster, records[j].Created, nil
					records[j] = agreeing
				}
			}
			if t.Failed() {
				return
			}
			t.Run(fmt.Sprintf("set %d", i), func(t *testing.T) { checkEveryOrder(t, records) })
			res, _ := Merge(records)
			for _, r := range res.Verdicts[records[0].Cluster].Reasons {
				seen[r]++
			}
			if len(res.Verdicts[records[0].Cluster].Reasons) == 0 {
				seen[mcsv1beta1.ServiceExportReasonNoConflicts]++
			}
		}
		// The sets must exercise every rule, or the property proves little.
		for _, r := range []mcsv1beta1.ServiceExportConditionReason{
			mcsv1beta1.ServiceExportReasonPortConflict, mcsv1beta1.ServiceExportReasonTypeConflict,
			mcsv1beta1.ServiceExportReasonSessionAffinityConflict, mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict,
			mcsv1beta1.ServiceExportReasonAnnotationsConflict, mcsv1beta1.ServiceExportReasonLabelsConflict,
			mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict, mcsv1beta1.ServiceExportReasonTrafficDistributionConflict,
			mcsv1beta1.ServiceExportReasonIPFamilyConflict, ReasonClusterSetIPConflict, mcsv1beta1.ServiceExportReasonNoConflicts,
		} {
			if seen[r] == 0 {
				t.Errorf("no random set has a %s", r)
			}
		}
		t.Logf("reasons over the random sets: %v", seen)
	})
}

// checkEveryOrder merges every permutation of records and requires the
// same result each time, and that the result keeps the invariants.
func checkEveryOrder(t *testing.T, records []record.Export) {
	t.Helper()
	want, err := Merge(records)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	checkInvariants(t, records, want)
	n := 0
	permute(slices.Clone(records), 0, func(order []record.Export) {
		n++
		got, err := Merge(order)
		if err != nil {
			t.Fatalf("Merge of order %v: %v", clusters(order), err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("order %v merges to\n%+v\nbut order %v to\n%+v", clusters(order), got, clusters(records), want)
		}
	})
	if want := factorial(len(records)); n != want {
		t.Fatalf("tried %d orders, want %d", n, want)
	}
}

func checkInvariants(t *testing.T, records []record.Export, res Result) {
	t.Helper()
	if len(res.Verdicts) != len(records) {
		t.Errorf("%d verdicts for %d exports", len(res.Verdicts), len(records))
	}
	conflicted := 0
	for _, r := range records {
		v, ok := res.Verdict(r.Cluster)
		if !ok {
			t.Errorf("no verdict for %q", r.Cluster)
		}
		if v.Conflict() {
			conflicted++
		}
		if v.Message == "" {
			t.Errorf("verdict of %q has no message", r.Cluster)
		}
	}
	if conflicted != 0 && conflicted != len(records) {
		t.Errorf("%d of %d exports in conflict: a conflict is every export's", conflicted, len(records))
	}
	if !slices.IsSorted(res.Clusters) || len(res.Clusters) == 0 || !slices.Contains(res.Clusters, res.Oldest) {
		t.Errorf("contributing clusters %v, oldest %q", res.Clusters, res.Oldest)
	}
	for _, r := range records {
		if !slices.Contains(res.Clusters, r.Cluster) {
			continue
		}
		if r.Type != res.Spec.Type || !slices.ContainsFunc(r.IPFamilies, func(f corev1.IPFamily) bool { return slices.Contains(res.Spec.IPFamilies, f) }) {
			t.Errorf("cluster %q of type %s and families %v contributes to a %s service of families %v",
				r.Cluster, r.Type, r.IPFamilies, res.Spec.Type, res.Spec.IPFamilies)
		}
	}
	names, numbers := map[string]bool{}, map[string]bool{}
	for _, p := range res.Spec.Ports {
		if names[p.Name] || numbers[numberOf(p)] {
			t.Errorf("port %+v twice in %+v", p, res.Spec.Ports)
		}
		names[p.Name], numbers[numberOf(p)] = true, true
	}
	if !slices.IsSortedFunc(res.Spec.Ports, comparePorts) {
		t.Errorf("ports not sorted: %+v", res.Spec.Ports)
	}
	if len(res.Spec.IPFamilies) == 0 || len(res.Spec.IPFamilies) > 2 || len(res.Spec.IPs) > 2 {
		t.Errorf("families %v, ips %v", res.Spec.IPFamilies, res.Spec.IPs)
	}
	switch {
	case res.Spec.Type == mcsv1beta1.Headless:
		if res.Spec.IPs != nil || res.MissingVIPFamilies != nil {
			t.Errorf("headless with ips %v, missing %v", res.Spec.IPs, res.MissingVIPFamilies)
		}
	case res.Spec.IPs == nil && res.MissingVIPFamilies == nil:
		// ClusterSetIPs disabled by the oldest export.
	case len(res.Spec.IPs)+len(res.MissingVIPFamilies) != len(res.Spec.IPFamilies):
		t.Errorf("ips %v and missing %v do not cover families %v", res.Spec.IPs, res.MissingVIPFamilies, res.Spec.IPFamilies)
	}
}

// randomExports are n exports of distinct clusters that differ in every
// merged property, drawn from small pools so that agreements and ties are
// as common as conflicts. Each is a valid record.
func randomExports(rng *rand.Rand, n int) []record.Export {
	portPool := []mcsv1beta1.ServicePort{
		port("http", 80, corev1.ProtocolTCP),
		port("http", 8080, corev1.ProtocolTCP),
		port("web", 80, corev1.ProtocolTCP),
		port("dns", 53, corev1.ProtocolUDP),
		port("dns", 53, corev1.ProtocolTCP),
		{Name: "grpc", Port: 9090, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("kubernetes.io/h2c")},
		port("grpc", 9090, corev1.ProtocolTCP),
	}
	familyPool := [][]corev1.IPFamily{{v4}, {v6}, {v4, v6}, {v6, v4}}
	clusters := rng.Perm(9)[:n]
	out := make([]record.Export, 0, n)
	for _, c := range clusters {
		e := export(fmt.Sprintf("cluster-%d", c), 0)
		e.Created = metav1.NewTime(epoch.Add(time.Duration(rng.IntN(3)) * time.Second))
		if rng.IntN(4) == 0 {
			e.Type = mcsv1beta1.Headless
		}
		e.Ports = nil
		names, numbers := map[string]bool{}, map[string]bool{}
		for _, i := range rng.Perm(len(portPool))[:rng.IntN(4)] {
			p := portPool[i]
			if names[p.Name] || numbers[numberOf(p)] {
				continue
			}
			names[p.Name], numbers[numberOf(p)] = true, true
			e.Ports = append(e.Ports, p)
		}
		e.IPFamilies = slices.Clone(familyPool[rng.IntN(len(familyPool))])
		if rng.IntN(3) == 0 {
			clientIP(int32(60 * (1 + rng.IntN(2))))(&e)
		}
		if rng.IntN(4) == 0 {
			e.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		}
		if rng.IntN(4) == 0 {
			e.TrafficDistribution = ptr.To("PreferClose")
		}
		if rng.IntN(3) == 0 {
			e.ExportedLabels = map[string]string{"tier": fmt.Sprint(rng.IntN(2))}
		}
		if rng.IntN(3) == 0 {
			e.ExportedAnnotations = map[string]string{"owner": fmt.Sprint(rng.IntN(2))}
		}
		switch {
		case e.Type == mcsv1beta1.Headless:
		case rng.IntN(4) == 0:
			e.ClusterSetIPDisabled = true
		case rng.IntN(2) == 0:
			for _, f := range e.IPFamilies {
				if f == v4 {
					e.VIPs = append(e.VIPs, fmt.Sprintf("243.%d.0.1", c))
				} else if rng.IntN(2) == 0 {
					e.VIPs = append(e.VIPs, fmt.Sprintf("fd7a:6d63:7364:%d::1", c))
				}
			}
		}
		if err := e.Validate(); err != nil {
			panic(err)
		}
		out = append(out, e)
	}
	return out
}

// permute calls f with every ordering of s[k:] after s[:k], by swapping.
func permute(s []record.Export, k int, f func([]record.Export)) {
	if k == len(s) {
		f(s)
		return
	}
	for i := k; i < len(s); i++ {
		s[k], s[i] = s[i], s[k]
		permute(s, k+1, f)
		s[k], s[i] = s[i], s[k]
	}
}

func factorial(n int) int {
	if n <= 1 {
		return 1
	}
	return n * factorial(n-1)
}

func clusters(records []record.Export) []string {
	out := make([]string, len(records))
	for i, r := range records {
		out[i] = r.Cluster
	}
	return out
}
