package merge

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
)

var epoch = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

const (
	v4 = corev1.IPv4Protocol
	v6 = corev1.IPv6Protocol
)

// export is cluster's export of shop/cart, created age seconds after epoch:
// a ClusterIP Service with port "http" 80/TCP, IPv4, no session affinity,
// changed by the options.
func export(cluster string, age int, opts ...func(*record.Export)) record.Export {
	e := record.Export{
		Cluster:               cluster,
		Namespace:             "shop",
		Name:                  "cart",
		Created:               metav1.NewTime(epoch.Add(time.Duration(age) * time.Second)),
		Type:                  mcsv1beta1.ClusterSetIP,
		Ports:                 []mcsv1beta1.ServicePort{port("http", 80, corev1.ProtocolTCP)},
		SessionAffinity:       corev1.ServiceAffinityNone,
		IPFamilies:            []corev1.IPFamily{v4},
		InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
	}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func port(name string, number int32, proto corev1.Protocol) mcsv1beta1.ServicePort {
	return mcsv1beta1.ServicePort{Name: name, Port: number, Protocol: proto}
}

func headless(e *record.Export) { e.Type = mcsv1beta1.Headless }

func ports(p ...mcsv1beta1.ServicePort) func(*record.Export) {
	return func(e *record.Export) { e.Ports = p }
}

func families(f ...corev1.IPFamily) func(*record.Export) {
	return func(e *record.Export) { e.IPFamilies = f }
}

func vips(v ...string) func(*record.Export) {
	return func(e *record.Export) { e.VIPs = v }
}

func vipsOff(e *record.Export) { e.ClusterSetIPDisabled = true }

func clientIP(timeout int32) func(*record.Export) {
	return func(e *record.Export) {
		e.SessionAffinity = corev1.ServiceAffinityClientIP
		e.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(timeout)}}
	}
}

func mustMerge(t *testing.T, records ...record.Export) Result {
	t.Helper()
	res, err := Merge(records)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	return res
}

// reasons is cluster's Conflict reason string.
func reasons(t *testing.T, res Result, cluster string) string {
	t.Helper()
	v, ok := res.Verdict(cluster)
	if !ok {
		t.Fatalf("no verdict for cluster %q", cluster)
	}
	return v.Reason()
}

// expectReasons checks that every cluster has the reason string want.
func expectReasons(t *testing.T, res Result, want string, clusters ...string) {
	t.Helper()
	for _, c := range clusters {
		if got := reasons(t, res, c); got != want {
			v := res.Verdicts[c]
			t.Errorf("cluster %s: reason %q, want %q (message %q)", c, got, want, v.Message)
		}
	}
}

func expectPorts(t *testing.T, res Result, want ...mcsv1beta1.ServicePort) {
	t.Helper()
	if want == nil {
		want = []mcsv1beta1.ServicePort{}
	}
	if !apiequality.Semantic.DeepEqual(res.Spec.Ports, want) {
		t.Errorf("ports %+v, want %+v", res.Spec.Ports, want)
	}
}

func expectClusters(t *testing.T, res Result, want ...string) {
	t.Helper()
	if strings.Join(res.Clusters, ",") != strings.Join(want, ",") {
		t.Errorf("contributing clusters %v, want %v", res.Clusters, want)
	}
}

func TestMergeBasics(t *testing.T) {
	t.Run("a single export is the service, without conflicts", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, vips("243.1.0.7"), clientIP(60), func(e *record.Export) {
			e.TrafficDistribution = ptr.To("PreferClose")
			e.ExportedLabels = map[string]string{"tier": "frontend"}
			e.ExportedAnnotations = map[string]string{"owner": "cart"}
		}))
		want := mcsv1beta1.ServiceImportSpec{
			Ports:                 []mcsv1beta1.ServicePort{port("http", 80, corev1.ProtocolTCP)},
			IPs:                   []string{"243.1.0.7"},
			Type:                  mcsv1beta1.ClusterSetIP,
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
			IPFamilies:            []corev1.IPFamily{v4},
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
			TrafficDistribution:   ptr.To("PreferClose"),
		}
		if !apiequality.Semantic.DeepEqual(res.Spec, want) {
			t.Errorf("spec %+v, want %+v", res.Spec, want)
		}
		if res.Labels["tier"] != "frontend" || res.Annotations["owner"] != "cart" {
			t.Errorf("labels %v, annotations %v", res.Labels, res.Annotations)
		}
		expectClusters(t, res, "east")
		expectReasons(t, res, "NoConflicts", "east")
		if res.Oldest != "east" || len(res.MissingVIPFamilies) != 0 {
			t.Errorf("oldest %q, missing VIP families %v", res.Oldest, res.MissingVIPFamilies)
		}
	})

	t.Run("identical exports of three clusters merge without conflicts", func(t *testing.T) {
		res := mustMerge(t, export("west", 2), export("east", 0, vips("243.1.0.7")), export("north", 1))
		expectClusters(t, res, "east", "north", "west")
		expectReasons(t, res, "NoConflicts", "east", "north", "west")
		if v := res.Verdicts["west"]; v.Conflict() || v.Message != "No conflicts among the 3 exports of the service." {
			t.Errorf("verdict %+v", v)
		}
	})

	t.Run("no exports merge to nothing", func(t *testing.T) {
		res, err := Merge(nil)
		if err != nil || res.Spec.Type != "" || res.Clusters != nil || res.Verdicts != nil {
			t.Fatalf("Merge(nil) = %+v, %v", res, err)
		}
	})

	t.Run("exports of two services cannot be merged", func(t *testing.T) {
		_, err := Merge([]record.Export{export("east", 0), export("west", 0, func(e *record.Export) { e.Name = "till" })})
		if err == nil || !strings.Contains(err.Error(), "shop/cart, shop/till") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("two exports of one cluster cannot be merged", func(t *testing.T) {
		_, err := Merge([]record.Export{export("east", 0), export("east", 5)})
		if err == nil || !strings.Contains(err.Error(), `cluster "east"`) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("the result shares no memory with the exports", func(t *testing.T) {
		e := export("east", 0, clientIP(60), func(e *record.Export) {
			e.ExportedLabels = map[string]string{"tier": "frontend"}
			e.Ports[0].AppProtocol = ptr.To("http")
		})
		res := mustMerge(t, e)
		res.Labels["tier"] = "changed"
		*res.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = 1
		*res.Spec.Ports[0].AppProtocol = "changed"
		res.Spec.IPFamilies[0] = v6
		if e.ExportedLabels["tier"] != "frontend" || *e.SessionAffinityConfig.ClientIP.TimeoutSeconds != 60 ||
			*e.Ports[0].AppProtocol != "http" || e.IPFamilies[0] != v4 {
			t.Fatal("changing the result changed an export")
		}
	})
}

func TestPrecedence(t *testing.T) {
	t.Run("the oldest export wins, whatever the cluster IDs", func(t *testing.T) {
		res := mustMerge(t, export("a", 10, clientIP(60)), export("z", 0))
		if res.Oldest != "z" || res.Spec.SessionAffinity != corev1.ServiceAffinityNone {
			t.Fatalf("oldest %q, affinity %q", res.Oldest, res.Spec.SessionAffinity)
		}
	})

	t.Run("exports created in the same second are ordered by cluster ID", func(t *testing.T) {
		res := mustMerge(t, export("west", 0, clientIP(60)), export("east", 0))
		if res.Oldest != "east" || res.Spec.SessionAffinity != corev1.ServiceAffinityNone {
			t.Fatalf("oldest %q, affinity %q", res.Oldest, res.Spec.SessionAffinity)
		}
	})

	t.Run("creation times that differ below a second are a tie, as records keep seconds", func(t *testing.T) {
		west := export("west", 0, clientIP(60))
		west.Created = metav1.NewTime(epoch.Add(100 * time.Millisecond))
		east := export("east", 0)
		east.Created = metav1.NewTime(epoch.Add(900 * time.Millisecond))
		if res := mustMerge(t, west, east); res.Oldest != "east" {
			t.Fatalf("oldest %q, want east (tie broken by ID)", res.Oldest)
		}
	})

	t.Run("time zones do not change the order", func(t *testing.T) {
		west := export("west", 0)
		west.Created = metav1.NewTime(epoch.Add(-time.Second).In(time.FixedZone("UTC-10", -10*3600)))
		if res := mustMerge(t, export("east", 0), west); res.Oldest != "west" {
			t.Fatalf("oldest %q, want west", res.Oldest)
		}
	})

	t.Run("Compare says which export has precedence", func(t *testing.T) {
		if Compare(export("b", 0), export("a", 1)) >= 0 || Compare(export("a", 0), export("b", 0)) >= 0 ||
			Compare(export("a", 0), export("a", 0)) != 0 {
			t.Fatal("Compare orders wrongly")
		}
	})
}

func TestTypes(t *testing.T) {
	t.Run("headless export conflicts with ClusterIP export", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, vips("243.1.0.7")), export("west", 1, headless))
		if res.Spec.Type != mcsv1beta1.ClusterSetIP || len(res.Spec.IPs) != 1 {
			t.Errorf("type %q, ips %v", res.Spec.Type, res.Spec.IPs)
		}
		expectReasons(t, res, "TypeConflict", "east", "west")
		expectClusters(t, res, "east")
		if !strings.Contains(res.Verdicts["west"].Message, `This cluster's export is "Headless", so its endpoints are left out of the service.`) {
			t.Errorf("west's message does not say it is left out: %q", res.Verdicts["west"].Message)
		}
		if strings.Contains(res.Verdicts["east"].Message, "left out") {
			t.Errorf("east's message says it is left out: %q", res.Verdicts["east"].Message)
		}
	})

	t.Run("the oldest headless export makes the service headless, without IPs", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, headless), export("west", 1, vips("243.1.0.7")), export("north", 2, headless))
		if res.Spec.Type != mcsv1beta1.Headless || res.Spec.IPs != nil || res.MissingVIPFamilies != nil {
			t.Errorf("type %q, ips %v, missing %v", res.Spec.Type, res.Spec.IPs, res.MissingVIPFamilies)
		}
		expectClusters(t, res, "east", "north")
		expectReasons(t, res, "TypeConflict", "east", "west", "north")
	})

	t.Run("a left-out export's ports do not join the union", func(t *testing.T) {
		res := mustMerge(t, export("east", 0), export("west", 1, headless, ports(port("http", 80, corev1.ProtocolTCP), port("admin", 9000, corev1.ProtocolTCP))))
		expectPorts(t, res, port("http", 80, corev1.ProtocolTCP))
		expectReasons(t, res, "PortConflict,TypeConflict", "east", "west")
	})

	t.Run("a left-out export's IP family does not narrow the service's", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v4, v6)), export("west", 1, headless, families(v6)))
		if got := res.Spec.IPFamilies; len(got) != 2 {
			t.Errorf("families %v, want IPv4, IPv6", got)
		}
		expectReasons(t, res, "TypeConflict,IPFamilyConflict", "east", "west")
	})
}

func TestPorts(t *testing.T) {
	http := port("http", 80, corev1.ProtocolTCP)

	t.Run("a new port on one of two clusters is a union and a PortConflict on both", func(t *testing.T) {
		sctp := port("stcp", 142, corev1.ProtocolSCTP)
		res := mustMerge(t, export("east", 0), export("west", 1, ports(http, sctp)))
		expectPorts(t, res, http, sctp)
		expectReasons(t, res, "PortConflict", "east", "west")
		want := `Conflicting ports ("stcp"). Using the union of the exported ports, and for a port defined differently the definition of the oldest service export, in "east". 1/2 clusters disagree.`
		if got := res.Verdicts["west"].Message; got != want {
			t.Errorf("message %q, want %q", got, want)
		}
	})

	t.Run("a port name with another number keeps the oldest definition", func(t *testing.T) {
		res := mustMerge(t, export("west", 1, ports(port("http", 81, corev1.ProtocolTCP))), export("east", 0))
		expectPorts(t, res, http)
		expectReasons(t, res, "PortConflict", "east", "west")
	})

	t.Run("a port name with another protocol keeps the oldest definition", func(t *testing.T) {
		res := mustMerge(t, export("east", 0), export("west", 1, ports(port("http", 80, corev1.ProtocolUDP))))
		expectPorts(t, res, http)
		expectReasons(t, res, "PortConflict", "east", "west")
	})

	t.Run("a port name with another appProtocol keeps the oldest definition", func(t *testing.T) {
		h2c := http
		h2c.AppProtocol = ptr.To("kubernetes.io/h2c")
		res := mustMerge(t, export("east", 0, ports(h2c)), export("west", 1))
		expectPorts(t, res, h2c)
		expectReasons(t, res, "PortConflict", "east", "west")
	})

	t.Run("the same number and protocol under another name is left out and conflicts", func(t *testing.T) {
		res := mustMerge(t, export("east", 0), export("west", 1, ports(port("web", 80, corev1.ProtocolTCP))))
		expectPorts(t, res, http)
		expectReasons(t, res, "PortConflict", "east", "west")
	})

	t.Run("the same number under another protocol and name joins the union", func(t *testing.T) {
		dnsTCP, dnsUDP := port("dns-tcp", 53, corev1.ProtocolTCP), port("dns", 53, corev1.ProtocolUDP)
		res := mustMerge(t, export("east", 0, ports(dnsTCP)), export("west", 1, ports(dnsUDP)))
		expectPorts(t, res, dnsTCP, dnsUDP)
		expectReasons(t, res, "PortConflict", "east", "west")
	})

	t.Run("an empty protocol means TCP and an empty appProtocol none", func(t *testing.T) {
		implicit := mcsv1beta1.ServicePort{Name: "http", Port: 80, AppProtocol: ptr.To("")}
		res := mustMerge(t, export("east", 0, ports(implicit)), export("west", 1))
		expectPorts(t, res, http)
		expectReasons(t, res, "NoConflicts", "east", "west")
	})

	t.Run("ports are sorted by number, protocol and name whatever the exports' order", func(t *testing.T) {
		a, b, c := port("metrics", 9090, corev1.ProtocolTCP), port("dns", 53, corev1.ProtocolUDP), port("dns-tcp", 53, corev1.ProtocolTCP)
		res := mustMerge(t, export("east", 0, ports(a, b, c)))
		expectPorts(t, res, c, b, a)
	})

	t.Run("the same ports in another order are no conflict", func(t *testing.T) {
		a, b := port("http", 80, corev1.ProtocolTCP), port("grpc", 9090, corev1.ProtocolTCP)
		res := mustMerge(t, export("east", 0, ports(a, b)), export("west", 1, ports(b, a)))
		expectReasons(t, res, "NoConflicts", "east", "west")
	})

	t.Run("a headless service without ports has an empty port list", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, headless, ports()))
		if res.Spec.Ports == nil || len(res.Spec.Ports) != 0 {
			t.Fatalf("ports %#v, want an empty list (the CRD requires the field)", res.Spec.Ports)
		}
	})

	t.Run("unnamed ports in dispute are named by number", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, ports(port("", 80, corev1.ProtocolTCP))), export("west", 1, ports(port("", 8080, corev1.ProtocolTCP))))
		expectPorts(t, res, port("", 80, corev1.ProtocolTCP))
		if msg := res.Verdicts["east"].Message; !strings.Contains(msg, "Conflicting ports (80/TCP, 8080/TCP).") {
			t.Errorf("message %q", msg)
		}
	})
}

func TestOldestWins(t *testing.T) {
	for _, tc := range []struct {
		name   string
		newer  func(*record.Export)
		reason string
		check  func(t *testing.T, res Result)
	}{
		{"session affinity of the oldest export wins", clientIP(10800), "SessionAffinityConflict,SessionAffinityConfigConflict",
			func(t *testing.T, res Result) {
				if res.Spec.SessionAffinity != corev1.ServiceAffinityNone || res.Spec.SessionAffinityConfig != nil {
					t.Errorf("affinity %q %v", res.Spec.SessionAffinity, res.Spec.SessionAffinityConfig)
				}
			}},
		{"an empty session affinity agrees with None", func(e *record.Export) { e.SessionAffinity = "" }, "NoConflicts", nil},
		{"internal traffic policy of the oldest export wins",
			func(e *record.Export) { e.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal) }, "InternalTrafficPolicyConflict",
			func(t *testing.T, res Result) {
				if *res.Spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyCluster {
					t.Errorf("policy %q", *res.Spec.InternalTrafficPolicy)
				}
			}},
		{"an unset internal traffic policy agrees with Cluster", func(e *record.Export) { e.InternalTrafficPolicy = nil }, "NoConflicts", nil},
		{"traffic distribution of the oldest export wins", func(e *record.Export) { e.TrafficDistribution = ptr.To("PreferClose") }, "TrafficDistributionConflict",
			func(t *testing.T, res Result) {
				if res.Spec.TrafficDistribution != nil {
					t.Errorf("distribution %q", *res.Spec.TrafficDistribution)
				}
			}},
		{"an empty traffic distribution agrees with an unset one", func(e *record.Export) { e.TrafficDistribution = ptr.To("") }, "NoConflicts", nil},
		{"exported labels of the oldest export win",
			func(e *record.Export) { e.ExportedLabels = map[string]string{"dummy-label2": "true"} }, "LabelsConflict",
			func(t *testing.T, res Result) {
				if res.Labels["dummy-label"] != "true" || res.Labels["dummy-label2"] != "" {
					t.Errorf("labels %v", res.Labels)
				}
			}},
		{"exported annotations of the oldest export win",
			func(e *record.Export) { e.ExportedAnnotations = map[string]string{"dummy-annotation2": "true"} }, "AnnotationsConflict",
			func(t *testing.T, res Result) {
				if res.Annotations["dummy-annotation"] != "true" || len(res.Annotations) != 1 {
					t.Errorf("annotations %v", res.Annotations)
				}
			}},
		{"no exported labels on a newer export conflict with the oldest's",
			func(e *record.Export) { e.ExportedLabels = nil }, "LabelsConflict", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oldest := export("east", 0, func(e *record.Export) {
				e.ExportedLabels = map[string]string{"dummy-label": "true"}
				e.ExportedAnnotations = map[string]string{"dummy-annotation": "true"}
			})
			newer := export("west", 1, func(e *record.Export) {
				e.ExportedLabels = map[string]string{"dummy-label": "true"}
				e.ExportedAnnotations = map[string]string{"dummy-annotation": "true"}
			}, tc.newer)
			res := mustMerge(t, newer, oldest)
			expectReasons(t, res, tc.reason, "east", "west")
			expectClusters(t, res, "east", "west")
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}

	t.Run("a session affinity timeout of its own is a SessionAffinityConfigConflict only", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, clientIP(60)), export("west", 1, clientIP(10800)))
		expectReasons(t, res, "SessionAffinityConfigConflict", "east", "west")
		if got := *res.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds; got != 60 {
			t.Errorf("timeout %d, want the oldest's 60", got)
		}
		want := `Conflicting sessionAffinityConfig. Using clientIP timeoutSeconds 60 from oldest service export in "east". 1/2 clusters disagree.`
		if got := res.Verdicts["east"].Message; got != want {
			t.Errorf("message %q, want %q", got, want)
		}
	})
}

func TestIPFamilies(t *testing.T) {
	t.Run("ip families are the oldest's, and a difference is a conflict", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v6, v4)), export("west", 1, families(v4)), export("north", 2, families(v4, v6)))
		if got := res.Spec.IPFamilies; len(got) != 2 || got[0] != v6 || got[1] != v4 {
			t.Errorf("families %v, want IPv6, IPv4", got)
		}
		expectReasons(t, res, "IPFamilyConflict", "east", "west", "north")
		expectClusters(t, res, "east", "north", "west")
		want := `Conflicting ipFamilies. Using "IPv6", "IPv4" from oldest service export in "east". 1/3 clusters disagree.`
		if got := res.Verdicts["west"].Message; got != want {
			t.Errorf("message %q, want %q", got, want)
		}
	})

	t.Run("a newer single-stack export does not narrow a dual-stack service", func(t *testing.T) {
		res := mustMerge(t,
			export("east", 0, families(v4, v6), vips("243.1.0.1", "fd7a:6d63:7364:1::1")),
			export("west", 1, families(v6), vips("fd7a:6d63:7364:2::1")))
		if got := res.Spec.IPFamilies; len(got) != 2 || got[0] != v4 || got[1] != v6 {
			t.Errorf("families %v, want IPv4, IPv6", got)
		}
		if len(res.Spec.IPs) != 2 || res.Spec.IPs[0] != "243.1.0.1" || res.Spec.IPs[1] != "fd7a:6d63:7364:1::1" {
			t.Errorf("ips %v, want the oldest's two", res.Spec.IPs)
		}
		expectReasons(t, res, "IPFamilyConflict", "east", "west")
		expectClusters(t, res, "east", "west")
	})

	t.Run("a newer dual-stack export does not widen a single-stack service", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v4)), export("west", 1, families(v4, v6)))
		if got := res.Spec.IPFamilies; len(got) != 1 || got[0] != v4 {
			t.Errorf("families %v, want IPv4", got)
		}
		expectReasons(t, res, "IPFamilyConflict", "east", "west")
	})

	t.Run("dual-stack exports that list their families in another order agree", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v6, v4)), export("west", 1, families(v4, v6)))
		if got := res.Spec.IPFamilies; len(got) != 2 || got[0] != v6 {
			t.Errorf("families %v, want IPv6, IPv4 (the oldest's order)", got)
		}
		expectReasons(t, res, "NoConflicts", "east", "west")
	})

	t.Run("an export with none of the oldest's families is left out", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v6), vips("fd7a:6d63:7364:1::7")), export("west", 1, families(v4)))
		if got := res.Spec.IPFamilies; len(got) != 1 || got[0] != v6 {
			t.Errorf("families %v, want IPv6", got)
		}
		if len(res.Spec.IPs) != 1 || res.Spec.IPs[0] != "fd7a:6d63:7364:1::7" {
			t.Errorf("ips %v", res.Spec.IPs)
		}
		expectReasons(t, res, "IPFamilyConflict", "east", "west")
		expectClusters(t, res, "east")
		want := `Conflicting ipFamilies. Using "IPv6" from oldest service export in "east". 1/2 clusters disagree. ` +
			`This cluster's export has none of the service's IP families ("IPv6"), so its endpoints are left out of the service.`
		if got := res.Verdicts["west"].Message; got != want {
			t.Errorf("message %q, want %q", got, want)
		}
	})

	t.Run("exports with one of the oldest's families stay in the service", func(t *testing.T) {
		res := mustMerge(t,
			export("east", 0, families(v4, v6), vips("243.1.0.1", "fd7a:6d63:7364:1::1")),
			export("west", 1, families(v4), ports(port("west-only", 81, corev1.ProtocolTCP))),
			export("north", 2, families(v6)),
			export("south", 3, families(v6), ports(port("south-only", 82, corev1.ProtocolTCP))))
		if got := res.Spec.IPFamilies; len(got) != 2 || got[0] != v4 || got[1] != v6 || len(res.Spec.IPs) != 2 {
			t.Errorf("families %v, ips %v, want the oldest's two", got, res.Spec.IPs)
		}
		expectClusters(t, res, "east", "north", "south", "west")
		expectReasons(t, res, "PortConflict,IPFamilyConflict", "east", "west", "north", "south")
	})

	t.Run("a left-out export's ports do not join the union", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v4)), export("west", 1, families(v6), ports(port("admin", 9000, corev1.ProtocolTCP))))
		expectPorts(t, res, port("http", 80, corev1.ProtocolTCP))
		expectClusters(t, res, "east")
	})
}

func TestClusterSetIPs(t *testing.T) {
	t.Run("the VIP comes from the oldest export that holds one", func(t *testing.T) {
		res := mustMerge(t, export("east", 0), export("west", 1, vips("243.2.0.9")), export("north", 2, vips("243.3.0.1")))
		if len(res.Spec.IPs) != 1 || res.Spec.IPs[0] != "243.2.0.9" {
			t.Fatalf("ips %v, want west's", res.Spec.IPs)
		}
		expectReasons(t, res, "NoConflicts", "east", "west", "north")
	})

	t.Run("a dual-stack service has one VIP per family, in family order", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v6, v4), vips("243.1.0.7", "fd7a:6d63:7364:1::7")))
		if got := res.Spec.IPs; len(got) != 2 || got[0] != "fd7a:6d63:7364:1::7" || got[1] != "243.1.0.7" {
			t.Fatalf("ips %v, want the IPv6 VIP then the IPv4 one", got)
		}
		if len(res.Spec.IPs) != len(res.Spec.IPFamilies) {
			t.Fatal("len(ips) != len(ipFamilies)")
		}
	})

	t.Run("a family no export holds a VIP of is missing, and ips is shorter", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v4, v6), vips("243.1.0.7")))
		if len(res.Spec.IPs) != 1 || len(res.MissingVIPFamilies) != 1 || res.MissingVIPFamilies[0] != v6 {
			t.Fatalf("ips %v, missing %v", res.Spec.IPs, res.MissingVIPFamilies)
		}
	})

	t.Run("each family's VIP may come from another export", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v4, v6), vips("243.1.0.7")), export("west", 1, families(v4, v6), vips("243.2.0.1", "fd7a:6d63:7364:2::1")))
		if got := res.Spec.IPs; len(got) != 2 || got[0] != "243.1.0.7" || got[1] != "fd7a:6d63:7364:2::1" {
			t.Fatalf("ips %v", got)
		}
	})

	t.Run("only VIPs of the service's families are used", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v4)), export("west", 1, families(v4, v6), vips("243.2.0.1", "fd7a:6d63:7364:2::1")))
		if got := res.Spec.IPs; len(got) != 1 || got[0] != "243.2.0.1" {
			t.Fatalf("ips %v", got)
		}
	})

	t.Run("no export holding a VIP yet leaves every family missing", func(t *testing.T) {
		res := mustMerge(t, export("east", 0))
		if res.Spec.IPs != nil || len(res.MissingVIPFamilies) != 1 {
			t.Fatalf("ips %v, missing %v", res.Spec.IPs, res.MissingVIPFamilies)
		}
	})

	t.Run("an oldest export that opted out of VIPs leaves the service without IPs and conflicts with one that did not", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, vipsOff), export("west", 1, vips("243.2.0.1")))
		if res.Spec.IPs != nil || res.MissingVIPFamilies != nil {
			t.Fatalf("ips %v, missing %v", res.Spec.IPs, res.MissingVIPFamilies)
		}
		expectReasons(t, res, "ClusterSetIPConflict", "east", "west")
		want := `Conflicting ClusterSetIP setting. Using "disabled" from oldest service export in "east". 1/2 clusters disagree.`
		if got := res.Verdicts["west"].Message; got != want {
			t.Errorf("message %q, want %q", got, want)
		}
	})

	t.Run("a newer export that opted out of VIPs conflicts, and the service keeps its VIP", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, vips("243.1.0.7")), export("west", 1, vipsOff))
		if len(res.Spec.IPs) != 1 || res.Spec.IPs[0] != "243.1.0.7" {
			t.Fatalf("ips %v", res.Spec.IPs)
		}
		expectReasons(t, res, "ClusterSetIPConflict", "east", "west")
		expectClusters(t, res, "east", "west")
	})

	t.Run("all exports opting out of VIPs agree", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, vipsOff), export("west", 1, vipsOff))
		expectReasons(t, res, "NoConflicts", "east", "west")
		if res.Spec.IPs != nil {
			t.Fatalf("ips %v", res.Spec.IPs)
		}
	})

	t.Run("headless exports have no say on VIPs", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, headless), export("west", 1, headless, vipsOff))
		expectReasons(t, res, "NoConflicts", "east", "west")
		res = mustMerge(t, export("east", 0, vips("243.1.0.7")), export("west", 1, headless, vipsOff))
		expectReasons(t, res, "TypeConflict", "east", "west")
	})

	t.Run("a VIP is written in its canonical form", func(t *testing.T) {
		res := mustMerge(t, export("east", 0, families(v6), vips("FD7A:6D63:7364:0001:0:0:0:7")))
		if len(res.Spec.IPs) != 1 || res.Spec.IPs[0] != "fd7a:6d63:7364:1::7" {
			t.Fatalf("ips %v", res.Spec.IPs)
		}
	})
}

func TestVerdicts(t *testing.T) {
	t.Run("every export is in conflict, also one that agrees with the oldest", func(t *testing.T) {
		res := mustMerge(t, export("east", 0), export("west", 1), export("north", 2, clientIP(60)))
		expectReasons(t, res, "SessionAffinityConflict,SessionAffinityConfigConflict", "east", "west", "north")
	})

	t.Run("the message names the field, the value used, the winning cluster and how many disagree", func(t *testing.T) {
		res := mustMerge(t, export("c1", 0), export("c2", 1, headless), export("c3", 2), export("c4", 3, headless), export("c5", 4))
		want := `Conflicting type. Using "ClusterSetIP" from oldest service export in "c1". 2/5 clusters disagree.`
		if got := res.Verdicts["c1"].Message; got != want {
			t.Errorf("message %q, want %q", got, want)
		}
	})

	t.Run("several conflicts are comma-joined in mcs-api's order and explained in that order", func(t *testing.T) {
		res := mustMerge(t,
			export("east", 0, vips("243.1.0.7")),
			export("west", 1, vipsOff, families(v4, v6), clientIP(60), ports(port("grpc", 9090, corev1.ProtocolTCP)), func(e *record.Export) {
				e.ExportedLabels = map[string]string{"a": "b"}
				e.ExportedAnnotations = map[string]string{"a": "b"}
				e.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				e.TrafficDistribution = ptr.To("PreferClose")
			}),
			export("north", 2, headless))
		want := "PortConflict,TypeConflict,SessionAffinityConflict,SessionAffinityConfigConflict,AnnotationsConflict,LabelsConflict," +
			"InternalTrafficPolicyConflict,TrafficDistributionConflict,IPFamilyConflict,ClusterSetIPConflict"
		expectReasons(t, res, want, "east", "west", "north")
		msg := res.Verdicts["west"].Message
		last := -1
		for _, field := range []string{"ports", "type", "sessionAffinity.", "sessionAffinityConfig", "exportedAnnotations", "exportedLabels",
			"internalTrafficPolicy", "trafficDistribution", "ipFamilies", "ClusterSetIP setting"} {
			i := strings.Index(msg, "Conflicting "+field)
			if i <= last {
				t.Fatalf("%q is missing or out of order in %q", field, msg)
			}
			last = i
		}
	})

	t.Run("a verdict without conflicts renders as Conflict=False NoConflicts", func(t *testing.T) {
		res := mustMerge(t, export("east", 0))
		c := res.Verdicts["east"].Condition(7)
		if c.Type != "Conflict" || c.Status != metav1.ConditionFalse || c.Reason != "NoConflicts" || c.ObservedGeneration != 7 ||
			c.Message != "No conflicts: this is the only export of the service." || !c.LastTransitionTime.IsZero() {
			t.Fatalf("condition %+v", c)
		}
	})

	t.Run("a verdict with conflicts renders as Conflict=True with the reasons and message", func(t *testing.T) {
		res := mustMerge(t, export("east", 0), export("west", 1, headless, ports(port("http", 81, corev1.ProtocolTCP))))
		v := res.Verdicts["west"]
		c := v.Condition(3)
		if c.Status != metav1.ConditionTrue || c.Reason != "PortConflict,TypeConflict" || c.Message != v.Message || c.ObservedGeneration != 3 {
			t.Fatalf("condition %+v", c)
		}
	})

	t.Run("a cluster that does not export the service has no verdict", func(t *testing.T) {
		if _, ok := mustMerge(t, export("east", 0)).Verdict("west"); ok {
			t.Fatal("west has a verdict")
		}
	})
}
