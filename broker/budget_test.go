package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/mcsd-io/mcsd/broker"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/test/lib/harness"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// filler returns entries whose budget cost (key, value and 16 bytes each)
// adds up to exactly cost, with keys of prefix and values made of fill.
func filler(prefix string, cost int, fill string) map[string]string {
	out := map[string]string{}
	for i := 0; cost > 0; i++ {
		key := fmt.Sprintf("%s%d", prefix, i)
		room := cost - len(key) - 16
		if room < 0 {
			panic(fmt.Sprintf("no room for an entry of %d bytes", cost))
		}
		n := min(room, 63)
		if room-n > 0 && room-n < len(key)+17 {
			n = room - len(key) - 17 // leave room for one more entry
		}
		out[key] = strings.Repeat(fill, n)
		cost -= len(key) + 16 + n
	}
	return out
}

func metadataCost(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v) + 16
	}
	return n
}

// managedCost is what the budget policy charges for managedFields.
func managedCost(t *testing.T, entries []metav1.ManagedFieldsEntry) int {
	t.Helper()
	var walk func(m map[string]any, depth int) int
	walk = func(m map[string]any, depth int) int {
		n := 0
		for k, v := range m {
			n += len(k) + 16
			if sub, ok := v.(map[string]any); ok && depth < 4 {
				n += walk(sub, depth+1)
			}
		}
		return n
	}
	n := 0
	for _, e := range entries {
		n += len(e.Manager) + len(e.APIVersion) + len(e.Subresource) + 160
		if e.FieldsV1 != nil {
			var fields map[string]any
			if err := json.Unmarshal(e.FieldsV1.Raw, &fields); err != nil {
				t.Fatal(err)
			}
			n += walk(fields, 1)
		}
	}
	return n
}

// stuffing is a managedFields entry of a made-up manager whose cost is
// exactly cost: keys of up to 63 characters under f:metadata/f:labels, of
// the API version of the object's own entries (the API server drops field
// sets it cannot convert).
func stuffing(t *testing.T, apiVersion string, cost int) metav1.ManagedFieldsEntry {
	t.Helper()
	e := metav1.ManagedFieldsEntry{Manager: "stuffing", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: apiVersion, FieldsType: "FieldsV1", Time: ptr.To(metav1.Now())}
	left := cost - (len(e.Manager) + len(e.APIVersion) + 160) - (len("f:metadata") + 16) - (len("f:labels") + 16)
	labels := map[string]any{}
	for i := 0; left > 0; i++ {
		prefix := fmt.Sprintf("f:x%d", i)
		n := min(63, left-16)
		if rest := left - 16 - n; rest > 0 && rest < 16+len(prefix) {
			n -= len(prefix) + 16 - rest
		}
		if n < len(prefix) {
			t.Fatalf("cannot stuff %d bytes", left)
		}
		labels[prefix+strings.Repeat("y", n-len(prefix))] = map[string]any{}
		left -= n + 16
	}
	raw, err := json.Marshal(map[string]any{"f:metadata": map[string]any{"f:labels": labels}})
	if err != nil {
		t.Fatal(err)
	}
	e.FieldsV1 = &metav1.FieldsV1{Raw: raw}
	if got := managedCost(t, []metav1.ManagedFieldsEntry{e}); got != cost {
		t.Fatalf("stuffing costs %d, want %d", got, cost)
	}
	return e
}

// TestTheWorstCaseObjectsFitTheirComputedSize writes, as a member, the
// largest export record, EndpointSlice, Lease and claim the admission
// policies accept at the default settings (every label, annotation,
// managedFields, port, endpoint and string at its limit, with the
// characters that cost most to store), reads back what the broker stores,
// and checks that each takes no more than broker.WorstCase says; and that
// one byte more of any limit is refused.
func TestTheWorstCaseObjectsFitTheirComputedSize(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := cs.Broker
	if err := broker.Install(ctx, b.Config, broker.Settings{}); err != nil {
		t.Fatal(err)
	}
	budget := broker.DefaultMemberBudget
	worst := broker.WorstCase(broker.Settings{})
	// The longest cluster ID, and an IPv6 pod range.
	id := "c" + strings.Repeat("9", 62)
	pods := netip.MustParsePrefix("fd00:ffff:ffff:ffff::/64")
	token, err := broker.AddMember(ctx, b.Kube, ns, id, broker.MemberOptions{PodCIDRs: []netip.Prefix{pods}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.TokenConfig(token)
	kube, mcs := kubernetes.NewForConfigOrDie(cfg), mcsclient.NewForConfigOrDie(cfg)
	own := record.MemberNamespace(ns, id)
	svcNS, svcName := "n"+strings.Repeat("s", 62), "s"+strings.Repeat("n", 62)
	long := func(prefix string, n int) string { return prefix + strings.Repeat("a", n-len(prefix)) }
	type stored struct {
		what      string
		got, want int64
	}
	var sizes []stored

	// fill brings an object's managedFields to the budget, then reads
	// back what the broker stores.
	fill := func(t *testing.T, get func() (metav1.Object, error), update func(metav1.Object) error, raw func() ([]byte, error)) int64 {
		t.Helper()
		obj, err := get()
		if err != nil {
			t.Fatal(err)
		}
		have := managedCost(t, obj.GetManagedFields())
		version := obj.GetManagedFields()[0].APIVersion
		over := obj.(runtime.Object).DeepCopyObject().(metav1.Object)
		over.SetManagedFields(append(over.GetManagedFields(), stuffing(t, version, budget.ManagedFieldsBytes-have+1)))
		if err := update(over); err == nil || !strings.Contains(err.Error(), broker.BudgetPolicy) {
			t.Errorf("one more byte of managedFields: %v", err)
		}
		obj.SetManagedFields(append(obj.GetManagedFields(), stuffing(t, version, budget.ManagedFieldsBytes-have)))
		accepted(t, update(obj))
		obj, err = get()
		if err != nil {
			t.Fatal(err)
		}
		if got := managedCost(t, obj.GetManagedFields()); got > budget.ManagedFieldsBytes || got < budget.ManagedFieldsBytes-200 {
			t.Fatalf("managedFields cost %d after stuffing, want about %d", got, budget.ManagedFieldsBytes)
		}
		data, err := raw()
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(data))
	}
	labels := func(own map[string]string) map[string]string {
		out := filler("l", budget.LabelBytes-metadataCost(own), "x")
		for k, v := range own {
			out[k] = v
		}
		return out
	}
	annotations := func(own map[string]string, room int) map[string]string {
		out := filler("a", room-metadataCost(own), `"`)
		for k, v := range own {
			out[k] = v
		}
		return out
	}

	t.Run("an export record", func(t *testing.T) {
		e := record.Export{
			Cluster: id, Namespace: svcNS, Name: svcName, Created: metav1.Now(), Type: mcsv1beta1.ClusterSetIP,
			IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			VIPs:            []string{"243.255.255.255", "fd7a:6d63:7364:ffff:ffff:ffff:ffff:ffff"},
			SessionAffinity: corev1.ServiceAffinityClientIP, SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](2147483647)}},
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal), TrafficDistribution: ptr.To(long("x", budget.StringBytes)),
		}
		for i := range budget.PortsPerRecord {
			e.Ports = append(e.Ports, mcsv1beta1.ServicePort{Name: long(fmt.Sprintf("p%d-", i), 63), Protocol: corev1.ProtocolSCTP, AppProtocol: ptr.To(long(fmt.Sprintf("a%d.", i), budget.StringBytes)), Port: int32(65535 - i)})
		}
		si := record.Encode(e)
		si.Namespace = own
		// Exported metadata: JSON values full of quotes, which the broker
		// stores escaped.
		exported := strings.Repeat(`"`, budget.ExportedMetadataBytes/2)
		si.Annotations[record.AnnotationExportedLabels] = exported
		si.Annotations[record.AnnotationExportedAnnotations] = strings.Repeat(`"`, budget.ExportedMetadataBytes-len(exported))
		si.Labels = labels(si.Labels)
		si.Annotations = annotations(si.Annotations, budget.AnnotationBytes+budget.ExportedMetadataBytes)
		records := mcs.MulticlusterV1beta1().ServiceImports(own)
		dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		for what, change := range map[string]func(*mcsv1beta1.ServiceImport){
			"a label":            func(o *mcsv1beta1.ServiceImport) { o.Labels["z"] = "" },
			"an annotation byte": func(o *mcsv1beta1.ServiceImport) { o.Annotations["a0"] += "x" },
			"an exported byte":   func(o *mcsv1beta1.ServiceImport) { o.Annotations[record.AnnotationExportedLabels] += "x" },
			"a port": func(o *mcsv1beta1.ServiceImport) {
				o.Spec.Ports = append(o.Spec.Ports, mcsv1beta1.ServicePort{Port: 1})
			},
			"an appProtocol byte":        func(o *mcsv1beta1.ServiceImport) { *o.Spec.Ports[0].AppProtocol += "x" },
			"a trafficDistribution byte": func(o *mcsv1beta1.ServiceImport) { *o.Spec.TrafficDistribution += "x" },
			"an escaped character":       func(o *mcsv1beta1.ServiceImport) { o.Annotations["a0"] = "<" },
			"a finalizer":                func(o *mcsv1beta1.ServiceImport) { o.Finalizers = []string{"example.com/keep"} },
		} {
			over := si.DeepCopy()
			change(over)
			_, err := records.Create(ctx, over, dryRun)
			if err == nil || !strings.Contains(err.Error(), broker.BudgetPolicy) {
				t.Errorf("one more: %s: %v", what, err)
			}
		}
		_, err := records.Create(ctx, si, metav1.CreateOptions{})
		accepted(t, err)
		got := fill(t,
			func() (metav1.Object, error) { return records.Get(ctx, si.Name, metav1.GetOptions{}) },
			func(o metav1.Object) error {
				_, err := records.Update(ctx, o.(*mcsv1beta1.ServiceImport), metav1.UpdateOptions{})
				return err
			},
			func() ([]byte, error) {
				return mcs.MulticlusterV1beta1().RESTClient().Get().Namespace(own).Resource("serviceimports").Name(si.Name).
					SetHeader("Accept", "application/json").DoRaw(ctx)
			})
		sizes = append(sizes, stored{"export record (JSON)", got, worst.Record})
	})

	t.Run("an EndpointSlice", func(t *testing.T) {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:   record.EndpointSliceName(id, svcNS, svcName, discoveryv1.AddressTypeIPv6, 999999),
				Labels: labels(record.EndpointSliceLabels(id, svcNS, svcName)),
			},
			AddressType: discoveryv1.AddressTypeIPv6,
		}
		s.Annotations = annotations(nil, budget.AnnotationBytes)
		for i := range budget.EndpointsPerSlice {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("fd00:ffff:ffff:ffff:ffff:ffff:ffff:%x", 0xff00+i)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(true)},
				Hostname:   ptr.To(long(fmt.Sprintf("h%d-", i), 63)),
			})
		}
		for i := range budget.PortsPerRecord {
			s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(long(fmt.Sprintf("p%d-", i), 63)), Protocol: ptr.To(corev1.ProtocolSCTP),
				Port: ptr.To(int32(65535 - i)), AppProtocol: ptr.To(long(fmt.Sprintf("a%d.", i), budget.StringBytes))})
		}
		slices := kube.DiscoveryV1().EndpointSlices(own)
		dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		for what, change := range map[string]func(*discoveryv1.EndpointSlice){
			"an endpoint": func(o *discoveryv1.EndpointSlice) { o.Endpoints = append(o.Endpoints, o.Endpoints[0]) },
			"a port": func(o *discoveryv1.EndpointSlice) {
				o.Ports = append(o.Ports, discoveryv1.EndpointPort{Port: ptr.To[int32](1)})
			},
			"a node name": func(o *discoveryv1.EndpointSlice) { o.Endpoints[0].NodeName = ptr.To("node-1") },
			"a zone":      func(o *discoveryv1.EndpointSlice) { o.Endpoints[0].Zone = ptr.To("zone-a") },
			"a target": func(o *discoveryv1.EndpointSlice) {
				o.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "p"}
			},
			"a label": func(o *discoveryv1.EndpointSlice) { o.Labels["z"] = "" },
			"an owner": func(o *discoveryv1.EndpointSlice) {
				o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u"}}
			},
		} {
			over := s.DeepCopy()
			change(over)
			_, err := slices.Create(ctx, over, dryRun)
			if err == nil || !strings.Contains(err.Error(), broker.BudgetPolicy) {
				t.Errorf("one more: %s: %v", what, err)
			}
		}
		_, err := slices.Create(ctx, s, metav1.CreateOptions{})
		accepted(t, err)
		got := fill(t,
			func() (metav1.Object, error) { return slices.Get(ctx, s.Name, metav1.GetOptions{}) },
			func(o metav1.Object) error {
				_, err := slices.Update(ctx, o.(*discoveryv1.EndpointSlice), metav1.UpdateOptions{})
				return err
			},
			func() ([]byte, error) {
				return kube.DiscoveryV1().RESTClient().Get().Namespace(own).Resource("endpointslices").Name(s.Name).
					SetHeader("Accept", "application/vnd.kubernetes.protobuf").DoRaw(ctx)
			})
		sizes = append(sizes, stored{"EndpointSlice (protobuf)", got, worst.Slice})
	})

	t.Run("a Lease", func(t *testing.T) {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: record.LeaseName(id), Labels: labels(record.LeaseLabels(id)), Annotations: annotations(nil, budget.AnnotationBytes)},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(long("h", budget.StringBytes)), PreferredHolder: ptr.To(long("p", budget.StringBytes)),
				LeaseDurationSeconds: ptr.To[int32](2147483647), LeaseTransitions: ptr.To[int32](2147483647),
				AcquireTime: ptr.To(metav1.NowMicro()), RenewTime: ptr.To(metav1.NowMicro()),
			},
		}
		leases := kube.CoordinationV1().Leases(own)
		over := l.DeepCopy()
		*over.Spec.HolderIdentity += "x"
		_, err := leases.Create(ctx, over, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), broker.BudgetPolicy) {
			t.Errorf("one more holder byte: %v", err)
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		accepted(t, err)
		got := fill(t,
			func() (metav1.Object, error) { return leases.Get(ctx, l.Name, metav1.GetOptions{}) },
			func(o metav1.Object) error {
				_, err := leases.Update(ctx, o.(*coordinationv1.Lease), metav1.UpdateOptions{})
				return err
			},
			func() ([]byte, error) {
				return kube.CoordinationV1().RESTClient().Get().Namespace(own).Resource("leases").Name(l.Name).
					SetHeader("Accept", "application/vnd.kubernetes.protobuf").DoRaw(ctx)
			})
		sizes = append(sizes, stored{"Lease (protobuf)", got, worst.Lease})
	})

	t.Run("a ClusterSetIP claim", func(t *testing.T) {
		block := netip.MustParsePrefix("fd7a:6d63:7364:ffff::/64")
		c := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:        vipalloc.ClaimName(id, corev1.IPv6Protocol),
				Labels:      labels(map[string]string{vipalloc.LabelClaim: "", mcsv1beta1.LabelSourceCluster: id}),
				Annotations: annotations(nil, budget.AnnotationBytes),
			},
			Data: map[string]string{vipalloc.ClaimKey: block.String()},
		}
		cms := kube.CoreV1().ConfigMaps(ns)
		_, err := cms.Create(ctx, c, metav1.CreateOptions{})
		accepted(t, err)
		// Claims cannot be updated: their managedFields are the writer's
		// own, measured as they are.
		data, err := b.Kube.CoreV1().RESTClient().Get().Namespace(ns).Resource("configmaps").Name(c.Name).
			SetHeader("Accept", "application/vnd.kubernetes.protobuf").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, stored{"claim (protobuf)", int64(len(data)), worst.Claim})
	})

	var report strings.Builder
	for _, s := range sizes {
		// The computed worst case includes etcd's bookkeeping of the key.
		fmt.Fprintf(&report, "%-26s stored %6d bytes, computed worst case %6d with etcd's bookkeeping\n", s.what, s.got, s.want)
		if s.got > s.want-int64(2*320+96) {
			t.Errorf("%s: the broker stores %d bytes, more than the computed %d", s.what, s.got, s.want)
		}
	}
	t.Logf("the largest objects the policies accept at the default settings:\n%s", report.String())
}

// TestMembersQuotasExportRulesAndLeaving: each member fills only its own
// quota; export rules keep members out of namespaces, and leaving takes
// everything of a member, or says what stays.
func TestMembersQuotasExportRulesAndLeaving(t *testing.T) {
	cs := harness.Start(t, harness.Options{Clusters: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	b := cs.Broker
	settings := broker.Settings{MemberBudget: broker.Budget{ServiceImports: 3, EndpointSlices: 3}}
	if err := broker.Install(ctx, b.Config, settings); err != nil {
		t.Fatal(err)
	}
	east, west := addMember(ctx, t, b, "east", netip.MustParsePrefix("10.2.0.0/16")), addMember(ctx, t, b, "west", netip.MustParsePrefix("10.3.0.0/16"))
	records := member.records

	t.Run("a member that fills its quota fills only its own", func(t *testing.T) {
		var err error
		n := 0
		for ; n < 10; n++ {
			if _, err = records(east).Create(ctx, exportRecord(t, "east", fmt.Sprintf("flood-%d", n)), metav1.CreateOptions{}); err != nil {
				break
			}
		}
		if n != 3 || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: "+broker.MemberQuotaName) {
			t.Fatalf("east wrote %d records, then %v; want 3, then its quota's refusal", n, err)
		}
		_, err = records(west).Create(ctx, exportRecord(t, "west", "cart"), metav1.CreateOptions{})
		accepted(t, err)
	})

	t.Run("a raised budget raises every member's quota", func(t *testing.T) {
		raised := settings
		raised.MemberBudget.ServiceImports = 4
		if err := broker.Install(ctx, b.Config, raised); err != nil {
			t.Fatal(err)
		}
		// Once the quota controller has taken the new limit, one more.
		var err error
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err = records(east).Create(ctx, exportRecord(t, "east", "flood-3"), metav1.CreateOptions{})
			return err == nil || !apierrors.IsForbidden(err), nil
		})
		accepted(t, err)
		accepted(t, records(east).Delete(ctx, record.Name("east", "shop", "flood-3"), metav1.DeleteOptions{}))
	})

	t.Run("export rules keep a member out of a namespace, whenever it writes", func(t *testing.T) {
		rule := broker.ExportRule{Name: "shop", Namespaces: []string{"shop", "team-*"}, Members: []string{"west"}}
		if err := broker.SetExportRule(ctx, b.Config, ns, rule); err != nil {
			t.Fatal(err)
		}
		// SetExportRule returned once the broker refuses east: no waiting.
		_, err := records(east).Create(ctx, exportRecord(t, "east", "cart"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, err, "cluster east may not export services of namespace shop: export rule mcsd-export-rule-shop lets only west export there")
		sl := slice("east", "cart", discoveryv1.AddressTypeIPv4, "10.2.0.5")
		_, err = east.kube.DiscoveryV1().EndpointSlices(sl.Namespace).Create(ctx, sl, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, err, "may not export services of namespace shop")
		other := exportRecord(t, "east", "cart")
		other.Labels[record.LabelServiceNamespace], other.Name = "team-a", record.Name("east", "team-a", "cart")
		_, err = records(east).Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, err, "may not export services of namespace team-a")
		other.Labels[record.LabelServiceNamespace], other.Name = "teams", record.Name("east", "teams", "cart")
		_, err = records(east).Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		accepted(t, err)
		// east's records of shop from before the rule: no update, but a
		// withdrawal.
		flood, err := records(east).Get(ctx, record.Name("east", "shop", "flood-0"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		flood.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		_, err = records(east).Update(ctx, flood, metav1.UpdateOptions{})
		refused(t, err, "may not export services of namespace shop")
		accepted(t, records(east).Delete(ctx, flood.Name, metav1.DeleteOptions{}))
		_, err = records(west).Update(ctx, func() *mcsv1beta1.ServiceImport {
			si, err := records(west).Get(ctx, record.Name("west", "shop", "cart"), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			si.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			return si
		}(), metav1.UpdateOptions{})
		accepted(t, err)

		rules, err := broker.ListExportRules(ctx, b.Kube, ns)
		if err != nil || len(rules) != 1 || !slices.Equal(rules[0].Namespaces, rule.Namespaces) || !slices.Equal(rules[0].Members, rule.Members) {
			t.Fatalf("rules %+v, %v", rules, err)
		}
		if ok, _ := rules.Allows("shop", "east"); ok {
			t.Fatal("the rules read back let east export shop")
		}
		if err := broker.DeleteExportRule(ctx, b.Kube, ns, "shop"); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := records(east).Create(ctx, exportRecord(t, "east", "cart"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("east may not export shop after the rule went: %v", err)
		}
	})

	t.Run("a member's identity cannot set when the broker first stored a record", func(t *testing.T) {
		si := exportRecord(t, "west", "old")
		si.Annotations[record.AnnotationStored] = "1970-01-01T00:00:00Z"
		_, err := records(west).Create(ctx, si, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, err, "may not set, change or remove the annotation "+record.AnnotationStored)
	})

	t.Run("leaving takes everything of a member, and says what a finalizer keeps", func(t *testing.T) {
		// A finalizer only an administrator can still set.
		westNS := record.MemberNamespace(ns, "west")
		si, err := b.MCS.MulticlusterV1beta1().ServiceImports(westNS).Get(ctx, record.Name("west", "shop", "cart"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		si.Finalizers = []string{"example.com/keep"}
		if _, err := b.MCS.MulticlusterV1beta1().ServiceImports(westNS).Update(ctx, si, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = broker.RemoveMember(ctx, b.Kube, b.MCS, ns, "west", 10*time.Second, t.Logf)
		if err == nil || !strings.Contains(err.Error(), "export record "+westNS+"/"+si.Name+" (being deleted, held by finalizers example.com/keep)") ||
			!strings.Contains(err.Error(), "namespace "+westNS) {
			t.Fatalf("leaving with a record held by a finalizer: %v", err)
		}
		si, err = b.MCS.MulticlusterV1beta1().ServiceImports(westNS).Get(ctx, si.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		si.Finalizers = nil
		if _, err := b.MCS.MulticlusterV1beta1().ServiceImports(westNS).Update(ctx, si, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := broker.RemoveMember(ctx, b.Kube, b.MCS, ns, "west", 2*time.Minute, t.Logf); err != nil {
			t.Fatal(err)
		}
		left, err := broker.MemberLeftovers(ctx, b.Kube, b.MCS, ns, "west")
		if err != nil || len(left) != 0 {
			t.Fatalf("left of west: %v, %v", left, err)
		}
		if left, _ := broker.MemberLeftovers(ctx, b.Kube, b.MCS, ns, "east"); len(left) == 0 {
			t.Fatal("east is gone too")
		}
		// Its place is free again.
		if _, err := broker.AddMember(ctx, b.Kube, ns, "west", broker.MemberOptions{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.3.0.0/16")}}); err != nil {
			t.Fatal(err)
		}
	})
}
