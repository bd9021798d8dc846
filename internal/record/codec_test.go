package record

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// example is the record docs/broker-records.md shows.
func example() Export {
	return Export{
		Cluster:   "east",
		Namespace: "shop",
		Name:      "cart",
		Created:   metav1.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC),
		Type:      mcsv1beta1.ClusterSetIP,
		Ports: []mcsv1beta1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http"), Port: 80},
			{Name: "grpc", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("kubernetes.io/h2c"), Port: 9090},
		},
		SessionAffinity: corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: &corev1.SessionAffinityConfig{
			ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](10800)},
		},
		IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
		TrafficDistribution:   ptr.To("PreferClose"),
		ExportedLabels:        map[string]string{"tier": "frontend"},
		ExportedAnnotations:   map[string]string{"example.com/owner": "team-cart"},
		VIPs:                  []string{"243.1.0.7", "fd7a:6d63:7364:1::7"},
	}
}

// minimal is the smallest valid export: a headless Service without ports.
func minimal() Export {
	return Export{
		Cluster:    "west",
		Namespace:  "shop",
		Name:       "db",
		Created:    metav1.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC),
		Type:       mcsv1beta1.Headless,
		IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol},
	}
}

func TestEncodeMatchesTheDocumentedRecord(t *testing.T) {
	got, err := yaml.Marshal(Encode(example()))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "record.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("Encode(example) changed; if the format did on purpose, bump FormatVersion and run go test -update.\ngot:\n%s\nwant:\n%s", got, want)
	}
}

func TestTheDocumentedExampleIsTheExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "broker-records.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "### Example\n\n```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/broker-records.md has no example record")
	}
	var si mcsv1beta1.ServiceImport
	if err := yaml.UnmarshalStrict([]byte(block), &si); err != nil {
		t.Fatalf("the documented record does not parse: %v", err)
	}
	got, err := Decode(&si)
	if err != nil {
		t.Fatalf("the documented record is invalid: %v", err)
	}
	if !Equal(got, example()) || !UpToDate(&si, example()) {
		t.Fatalf("the documented record says %+v, the example is %+v", got, example())
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	optedOut := example()
	optedOut.ClusterSetIPDisabled = true
	optedOut.VIPs = nil
	notYetAllocated := example()
	notYetAllocated.VIPs = nil
	subSecond := example()
	subSecond.Created = metav1.NewTime(subSecond.Created.Add(700 * time.Millisecond).In(time.FixedZone("CET", 3600)))
	oddValues := example()
	oddValues.ExportedLabels = map[string]string{"a": "", "example.com/b": "x.y_z"}
	oddValues.ExportedAnnotations = map[string]string{"note": "quotes \" and, commas\nand newlines", "empty": ""}
	unnamedPort := minimal()
	unnamedPort.Type = mcsv1beta1.ClusterSetIP
	unnamedPort.Ports = []mcsv1beta1.ServicePort{{Protocol: corev1.ProtocolUDP, Port: 53}}

	for _, tc := range []struct {
		name string
		e    Export
	}{
		{"a dual-stack ClusterSetIP export with everything set survives a round trip", example()},
		{"a headless export without ports survives a round trip", minimal()},
		{"an export that opted out of ClusterSetIPs survives a round trip", optedOut},
		{"an export whose VIP is not allocated yet survives a round trip", notYetAllocated},
		{"exported labels and annotations with odd values survive a round trip", oddValues},
		{"a single unnamed port survives a round trip", unnamedPort},
		{"a creation time is kept to the second, in UTC", subSecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.e.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			si := Encode(tc.e)
			got, err := Decode(si)
			if err != nil {
				t.Fatalf("Decode(Encode(e)): %v", err)
			}
			if !Equal(got, tc.e) {
				t.Fatalf("Decode(Encode(e)) = %+v, want %+v", got, tc.e)
			}
			if !got.Created.Equal(&metav1.Time{Time: tc.e.Created.UTC().Truncate(time.Second)}) {
				t.Fatalf("created %v, want %v to the second", got.Created, tc.e.Created)
			}
			if again := Encode(got); !apiequality.Semantic.DeepEqual(again, si) {
				t.Fatalf("Encode(Decode(r)) differs from r:\n%+v\n%+v", again, si)
			}
		})
	}

	t.Run("an encoded record always has a ports list, which the CRD requires", func(t *testing.T) {
		if si := Encode(minimal()); si.Spec.Ports == nil {
			t.Fatal("spec.ports is nil: it would be sent as null")
		}
	})

	t.Run("encoding copies, so changing the record leaves the export alone", func(t *testing.T) {
		e := example()
		si := Encode(e)
		si.Spec.Ports[0].Port = 1
		*si.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = 1
		si.Spec.IPs[0] = "1.1.1.1"
		if !Equal(e, example()) {
			t.Fatal("changing the encoded record changed the export")
		}
	})

	t.Run("the record carries the service's labels and the format's annotations", func(t *testing.T) {
		si := Encode(example())
		if si.Name != "shop.cart.east" || si.Namespace != "" {
			t.Errorf("record %s/%s", si.Namespace, si.Name)
		}
		if !ServiceSelector("shop", "cart").Matches(labels.Set(si.Labels)) {
			t.Errorf("labels %v do not match the service selector", si.Labels)
		}
		for k, want := range map[string]string{
			AnnotationFormat:              "1",
			AnnotationExportCreated:       "2026-11-22T10:15:00Z",
			AnnotationExportedLabels:      `{"tier":"frontend"}`,
			AnnotationExportedAnnotations: `{"example.com/owner":"team-cart"}`,
		} {
			if got := si.Annotations[k]; got != want {
				t.Errorf("annotation %s = %q, want %q", k, got, want)
			}
		}
		if _, ok := si.Annotations[AnnotationClusterSetIPDisabled]; ok {
			t.Error("an export with ClusterSetIPs on has the opt-out annotation")
		}
	})
}

func TestDecodeRefusesMalformedRecords(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(si *mcsv1beta1.ServiceImport)
		want   string
	}{
		{"a record without its cluster label is invalid",
			func(si *mcsv1beta1.ServiceImport) { delete(si.Labels, LabelSourceCluster) },
			"label multicluster.kubernetes.io/source-cluster: missing"},
		{"a record without its service name label is invalid",
			func(si *mcsv1beta1.ServiceImport) { delete(si.Labels, LabelServiceName) },
			"label multicluster.kubernetes.io/service-name: missing"},
		{"a record without its service namespace label is invalid",
			func(si *mcsv1beta1.ServiceImport) { delete(si.Labels, LabelServiceNamespace) },
			"label mcsd.io/service-namespace: missing"},
		{"a record without the export's creation time is invalid",
			func(si *mcsv1beta1.ServiceImport) { delete(si.Annotations, AnnotationExportCreated) },
			"annotation mcsd.io/export-creation-timestamp: missing"},
		{"a record with an unreadable creation time is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Annotations[AnnotationExportCreated] = "yesterday" },
			`annotation mcsd.io/export-creation-timestamp: "yesterday" is not an RFC 3339 time`},
		{"a record without a format version is refused",
			func(si *mcsv1beta1.ServiceImport) { delete(si.Annotations, AnnotationFormat) },
			"annotation mcsd.io/record-format: missing"},
		{"a record of a newer format is refused rather than misread",
			func(si *mcsv1beta1.ServiceImport) { si.Annotations[AnnotationFormat] = "2" },
			`annotation mcsd.io/record-format: "2", but this mcsd reads format "1" only`},
		{"exported labels that are not a JSON object are invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Annotations[AnnotationExportedLabels] = "tier=frontend" },
			"annotation mcsd.io/exported-labels: not a JSON object of strings"},
		{"exported annotations with a non-string value are invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Annotations[AnnotationExportedAnnotations] = `{"a":1}` },
			"annotation mcsd.io/exported-annotations: not a JSON object of strings"},
		{"an exported label that is no valid label is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Annotations[AnnotationExportedLabels] = `{"a b":"c"}` },
			`annotation mcsd.io/exported-labels: label key "a b"`},
		{"a ClusterSetIP opt-out other than true or false is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Annotations[AnnotationClusterSetIPDisabled] = "yes" },
			`annotation mcsd.io/clusterset-ip-disabled: "yes"`},
		{"a record named for another cluster is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Name = "shop.cart.west" },
			`metadata.name: "shop.cart.west" does not match the record's labels, which name it "shop.cart.east"`},
		{"a cluster ID that is no DNS label is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Labels[LabelSourceCluster] = "East" },
			`label multicluster.kubernetes.io/source-cluster: "East" is not an RFC 1123 label`},
		{"a record without a type is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.Type = "" },
			"spec.type: missing"},
		{"a record of an unknown type is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.Type = "ExternalName" },
			`spec.type: "ExternalName"`},
		{"a port number out of range is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.Ports[1].Port = 70000 },
			"spec.ports[1].port: 70000 is not in 1-65535"},
		{"an unknown protocol is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.Ports[0].Protocol = "ICMP" },
			`spec.ports[0].protocol: "ICMP"`},
		{"two ports of one name are invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.Ports[1].Name = "http" },
			`spec.ports[1].name: "http" is the name of spec.ports[0] too`},
		{"two ports of one number and protocol are invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.Ports[1].Port = 80 },
			"spec.ports[1]: 80/TCP is spec.ports[0] too"},
		{"an unknown session affinity is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.SessionAffinity = "Cookie" },
			`spec.sessionAffinity: "Cookie"`},
		{"an unknown internal traffic policy is invalid",
			func(si *mcsv1beta1.ServiceImport) {
				si.Spec.InternalTrafficPolicy = ptr.To[corev1.ServiceInternalTrafficPolicy]("Node")
			},
			`spec.internalTrafficPolicy: "Node"`},
		{"a record without IP families is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.IPFamilies = nil },
			"spec.ipFamilies: missing"},
		{"an unknown IP family is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.IPFamilies[1] = "IPv5" },
			`spec.ipFamilies[1]: "IPv5"`},
		{"one IP family twice is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.IPFamilies[1] = corev1.IPv4Protocol },
			"spec.ipFamilies: IPv4 twice"},
		{"a VIP that is no IP address is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.IPs[0] = "243.1.0" },
			`spec.ips[0]: "243.1.0" is not an IP address`},
		{"two VIPs of one family are invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.IPs[1] = "243.1.0.8" },
			"spec.ips[1]: a second IPv4 address"},
		{"a headless record with VIPs is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Spec.Type = mcsv1beta1.Headless },
			"spec.ips: a Headless export has no ClusterSetIPs"},
		{"a record that opted out of ClusterSetIPs yet holds VIPs is invalid",
			func(si *mcsv1beta1.ServiceImport) { si.Annotations[AnnotationClusterSetIPDisabled] = "true" },
			"spec.ips: an export with ClusterSetIPs disabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			si := Encode(example())
			si.Namespace = "mcsd-broker"
			tc.break_(si)
			_, err := Decode(si)
			if err == nil {
				t.Fatal("Decode accepted the record")
			}
			var invalid *InvalidError
			if !errors.As(err, &invalid) {
				t.Fatalf("error %T is not an *InvalidError: %v", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "mcsd-broker/") {
				t.Fatalf("error %q does not name the record", err)
			}
		})
	}

	t.Run("a record without labels or annotations names every missing field once", func(t *testing.T) {
		si := Encode(example())
		si.Labels = nil
		delete(si.Annotations, AnnotationExportCreated)
		_, err := Decode(si)
		var invalid *InvalidError
		if !errors.As(err, &invalid) {
			t.Fatalf("Decode: %v", err)
		}
		want := []string{
			"label multicluster.kubernetes.io/source-cluster: missing (the exporting cluster's ID)",
			"label mcsd.io/service-namespace: missing (the Service's namespace)",
			"label multicluster.kubernetes.io/service-name: missing (the Service's name)",
			"annotation mcsd.io/export-creation-timestamp: missing (the ServiceExport's creationTimestamp)",
		}
		if strings.Join(invalid.Problems, "\n") != strings.Join(want, "\n") {
			t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(invalid.Problems, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("no record at all is an error, not a panic", func(t *testing.T) {
		if _, err := Decode(nil); err == nil {
			t.Fatal("Decode(nil) succeeded")
		}
	})
}

func TestEqualityForSkippingNoOpUpdates(t *testing.T) {
	t.Run("an export equals itself and its decoded record", func(t *testing.T) {
		got, err := Decode(Encode(example()))
		if err != nil || !Equal(example(), got) {
			t.Fatalf("Equal(example, decoded) false (%v)", err)
		}
	})

	t.Run("nil and empty lists and maps are equal", func(t *testing.T) {
		a, b := minimal(), minimal()
		b.Ports = []mcsv1beta1.ServicePort{}
		b.ExportedLabels = map[string]string{}
		b.VIPs = []string{}
		if !Equal(a, b) {
			t.Fatal("nil and empty differ")
		}
	})

	t.Run("any change of a recorded value is a difference", func(t *testing.T) {
		for name, change := range map[string]func(*Export){
			"VIP":               func(e *Export) { e.VIPs = e.VIPs[:1] },
			"port":              func(e *Export) { e.Ports[0].Port = 81 },
			"creation time":     func(e *Export) { e.Created = metav1.NewTime(e.Created.Add(time.Second)) },
			"exported label":    func(e *Export) { e.ExportedLabels["tier"] = "backend" },
			"ClusterSetIP flag": func(e *Export) { e.ClusterSetIPDisabled = true },
			"traffic policy":    func(e *Export) { e.TrafficDistribution = nil },
		} {
			e := example()
			change(&e)
			if Equal(example(), e) {
				t.Errorf("a changed %s is equal", name)
			}
		}
	})

	t.Run("a record written earlier is up to date, whatever else was added to it", func(t *testing.T) {
		existing := Encode(example())
		existing.Namespace = "mcsd-broker"
		existing.ResourceVersion = "42"
		existing.Labels["team"] = "cart"
		existing.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
		if !UpToDate(existing, example()) {
			t.Fatal("not up to date")
		}
	})

	t.Run("a record with a stale annotation or spec is not up to date", func(t *testing.T) {
		e := example()
		e.ExportedLabels = nil
		if UpToDate(Encode(example()), e) {
			t.Error("a record still holding exported labels that were removed is up to date")
		}
		e = example()
		e.Ports = e.Ports[:1]
		if UpToDate(Encode(example()), e) {
			t.Error("a record with a removed port is up to date")
		}
		if UpToDate(nil, e) {
			t.Error("no record is up to date")
		}
	})

	t.Run("applying an export keeps the object's metadata and makes it up to date", func(t *testing.T) {
		existing := Encode(example())
		existing.Namespace = "mcsd-broker"
		existing.ResourceVersion = "42"
		existing.Annotations["other.example.com/note"] = "kept"
		e := example()
		e.ExportedLabels = nil
		e.ClusterSetIPDisabled = true
		e.VIPs = nil
		got := Apply(existing, e)
		if !UpToDate(got, e) {
			t.Fatal("applied record is not up to date")
		}
		if got.ResourceVersion != "42" || got.Namespace != "mcsd-broker" || got.Annotations["other.example.com/note"] != "kept" {
			t.Fatalf("metadata lost: %+v", got.ObjectMeta)
		}
		if _, ok := got.Annotations[AnnotationExportedLabels]; ok {
			t.Fatal("stale exported labels annotation kept")
		}
		if existing.ResourceVersion != "42" || existing.Annotations[AnnotationExportedLabels] == "" {
			t.Fatal("Apply changed its argument")
		}
	})
}

func TestFromService(t *testing.T) {
	export := &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", CreationTimestamp: metav1.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)},
		Spec: mcsv1beta1.ServiceExportSpec{
			ExportedLabels:      map[string]string{"tier": "frontend"},
			ExportedAnnotations: map[string]string{"example.com/owner": "team-cart"},
		},
	}
	service := func(mutate func(*corev1.Service)) *corev1.Service {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", Labels: map[string]string{"not": "exported"}},
			Spec: corev1.ServiceSpec{
				Type:      corev1.ServiceTypeClusterIP,
				ClusterIP: "10.96.0.10",
				Ports: []corev1.ServicePort{
					{Name: "http", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http"), Port: 80, TargetPort: intstr.FromInt32(8080)},
					{Name: "grpc", Port: 9090, NodePort: 30090},
				},
				SessionAffinity:       corev1.ServiceAffinityNone,
				IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
				InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
				TrafficDistribution:   ptr.To("PreferClose"),
			},
		}
		if mutate != nil {
			mutate(svc)
		}
		return svc
	}

	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Service)
		want   mcsv1beta1.ServiceImportType
	}{
		{"a ClusterIP Service exports as ClusterSetIP", nil, mcsv1beta1.ClusterSetIP},
		{"a NodePort Service exports as ClusterSetIP", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }, mcsv1beta1.ClusterSetIP},
		{"a LoadBalancer Service exports as ClusterSetIP", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }, mcsv1beta1.ClusterSetIP},
		{"a Service with clusterIP None exports as Headless", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }, mcsv1beta1.Headless},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := FromService("east", export, service(tc.mutate))
			if err != nil {
				t.Fatal(err)
			}
			if e.Type != tc.want {
				t.Fatalf("type %q, want %q", e.Type, tc.want)
			}
		})
	}

	t.Run("an ExternalName Service cannot be exported", func(t *testing.T) {
		_, err := FromService("east", export, service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ClusterIP = ""
		}))
		if !errors.Is(err, ErrExternalName) {
			t.Fatalf("err = %v, want ErrExternalName", err)
		}
	})

	t.Run("a ServiceExport of another name does not export the Service", func(t *testing.T) {
		other := export.DeepCopy()
		other.Name = "till"
		if _, err := FromService("east", other, service(nil)); err == nil {
			t.Fatal("accepted")
		}
	})

	t.Run("the record takes the Service's values and the export's labels, and copies them", func(t *testing.T) {
		svc := service(nil)
		e, err := FromService("east", export, svc)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		want := []mcsv1beta1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http"), Port: 80},
			{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090},
		}
		if !apiequality.Semantic.DeepEqual(e.Ports, want) {
			t.Errorf("ports %+v, want %+v (no targetPort or nodePort, protocol spelled out)", e.Ports, want)
		}
		if e.Cluster != "east" || !e.Created.Equal(&export.CreationTimestamp) || e.ExportedLabels["tier"] != "frontend" ||
			e.ExportedAnnotations["example.com/owner"] != "team-cart" || *e.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyLocal ||
			*e.TrafficDistribution != "PreferClose" || e.SessionAffinity != corev1.ServiceAffinityNone {
			t.Errorf("export %+v", e)
		}
		e.ExportedLabels["tier"] = "changed"
		*e.Ports[0].AppProtocol = "changed"
		e.IPFamilies[0] = corev1.IPv6Protocol
		if export.Spec.ExportedLabels["tier"] != "frontend" || *svc.Spec.Ports[0].AppProtocol != "http" || svc.Spec.IPFamilies[0] != corev1.IPv4Protocol {
			t.Error("the export shares memory with the ServiceExport or Service")
		}
	})
}

func TestValidate(t *testing.T) {
	t.Run("a valid export has no problems", func(t *testing.T) {
		for _, e := range []Export{example(), minimal()} {
			if err := e.Validate(); err != nil {
				t.Errorf("Validate(%s): %v", e.Cluster, err)
			}
		}
	})

	t.Run("an export without a creation time names the record field", func(t *testing.T) {
		e := example()
		e.Created = metav1.Time{}
		err := e.Validate()
		if err == nil || !strings.Contains(err.Error(), "export record shop.cart.east: annotation mcsd.io/export-creation-timestamp: missing") {
			t.Fatalf("Validate = %v", err)
		}
	})
}

// A member must not win precedence by declaring an old export: the broker's
// creationTimestamp of the record object bounds it.
func TestDecodeBoundsPrecedenceByWhatTheBrokerWitnessed(t *testing.T) {
	declared := example().Created.Time
	for _, tc := range []struct {
		name        string
		stored      time.Time
		wantCreated time.Time
	}{
		{"a record stored after the declared time counts from when it was stored", declared.Add(48 * time.Hour), declared.Add(48 * time.Hour)},
		{"a record stored before the declared time keeps the declared time", declared.Add(-time.Hour), declared},
		{"the stored time counts to the second", declared.Add(90*time.Second + 700*time.Millisecond), declared.Add(90 * time.Second)},
		{"a record never stored keeps the declared time", time.Time{}, declared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			si := Encode(example())
			si.CreationTimestamp = metav1.NewTime(tc.stored)
			got, err := Decode(si)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Created.Time.Equal(tc.wantCreated) {
				t.Fatalf("created %v, want %v", got.Created, tc.wantCreated)
			}
			if p := Precedence(si); !p.Time.Equal(tc.wantCreated) {
				t.Fatalf("Precedence %v, want what Decode gives, %v", p, tc.wantCreated)
			}
		})
	}
	t.Run("a forged old declaration does not beat an export the broker saw first", func(t *testing.T) {
		honest := Encode(example())
		honest.CreationTimestamp = metav1.NewTime(declared.Add(time.Second))
		forger := example()
		forger.Cluster = "attacker"
		forger.Created = metav1.NewTime(declared.Add(-365 * 24 * time.Hour))
		forged := Encode(forger)
		forged.CreationTimestamp = metav1.NewTime(declared.Add(time.Hour))
		h, err := Decode(honest)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Decode(forged)
		if err != nil {
			t.Fatal(err)
		}
		if !h.Created.Before(&f.Created) {
			t.Fatalf("the forger's record counts from %v, before the honest one's %v", f.Created, h.Created)
		}
	})
}
