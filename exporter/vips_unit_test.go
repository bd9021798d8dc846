package exporter

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/record"
	"github.com/mcsd-io/mcsd/vipalloc"
)

// export is a record.Export of the test service by cluster, created at
// created, with ClusterSetIPs on and the given VIPs.
func export(cluster string, created time.Time, vips ...string) record.Export {
	return record.Export{
		Cluster: cluster, Namespace: testNamespace, Name: testName, Created: metav1.NewTime(created),
		Type:       mcsv1beta1.ClusterSetIP,
		Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		VIPs:       vips,
	}
}

// exhausted is an allocator of 243.1.0.0/30 with every address taken.
func exhausted() *vipalloc.Allocator {
	a := allocator("243.1.0.0/30")
	for _, s := range []string{"243.1.0.1", "243.1.0.2", "243.1.0.3"} {
		a.Reserve(netip.MustParseAddr(s))
	}
	return a
}

// testRule is the VIP rule of the unit tests: each test cluster owns the
// block its VIPs come from.
func testRule() vipalloc.Rule {
	var claims []vipalloc.Claim
	for i, c := range testClaims {
		claims = append(claims, vipalloc.Claim{Block: netip.MustParsePrefix(c.block), Cluster: c.cluster, Name: c.block, Revision: uint64(i + 1)})
	}
	return vipalloc.Rule{ClusterSet: []netip.Prefix{vipalloc.DefaultClusterSetCIDRv4, vipalloc.DefaultClusterSetCIDRv6}, Owners: vipalloc.Owners(claims)}
}

func TestChooseVIPs(t *testing.T) {
	older, oldest := exportCreated.Add(-time.Hour), exportCreated.Add(-2*time.Hour)
	newer := exportCreated.Add(time.Hour)
	for _, tc := range []struct {
		name      string
		own       func(*record.Export)
		others    []record.Export
		v4, v6    *vipalloc.Allocator
		want      []string
		exhausted bool   // the error is errVIPExhausted
		err       string // part of the error, when one is expected
		used      int    // addresses then taken in the IPv4 block
	}{
		{
			name: "the first exporter allocates from its own block",
			want: []string{"243.1.0.1"}, used: 1,
		},
		{
			name:   "a later exporter adopts the VIP of the oldest record",
			others: []record.Export{export("west", older, "243.2.0.5")},
			want:   []string{"243.2.0.5"},
		},
		{
			name:   "the oldest record without a VIP gives way to the oldest that has one",
			others: []record.Export{export("west", oldest), export("north", older, "243.3.0.9"), export("south", newer, "243.4.0.1")},
			want:   []string{"243.3.0.9"},
		},
		{
			name:   "this cluster keeps its own VIP over a newer export's",
			own:    func(e *record.Export) { e.VIPs = []string{"243.1.0.7"} },
			others: []record.Export{export("west", newer, "243.2.0.5")},
			want:   []string{"243.1.0.7"},
		},
		{
			name:   "a dual-stack export adopts the VIP of one family and allocates the other",
			own:    func(e *record.Export) { e.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} },
			others: []record.Export{export("west", older, "243.2.0.5")},
			v6:     allocator("fd7a:6d63:7364:1::/64"),
			want:   []string{"243.2.0.5", "fd7a:6d63:7364:1::1"},
		},
		{
			name:   "a VIP another cluster's record holds from a third cluster's block, for a service that cluster exports with another VIP, is not copied",
			others: []record.Export{export("west", oldest, "243.3.0.9"), export("north", older, "243.3.0.1")},
			want:   []string{"243.3.0.1"},
		},
		{
			name:   "a VIP outside the clusterset ranges is not copied",
			others: []record.Export{export("west", older, "169.254.169.254")},
			want:   []string{"243.1.0.1"}, used: 1,
		},
		{
			name: "a headless export gets no VIP",
			own:  func(e *record.Export) { e.Type = mcsv1beta1.Headless },
		},
		{
			name: "an export with VIPs off gets no VIP",
			own:  func(e *record.Export) { e.ClusterSetIPDisabled = true },
		},
		{
			name: "an older export with VIPs off leaves this one without a VIP",
			others: []record.Export{func() record.Export {
				e := export("west", older)
				e.ClusterSetIPDisabled = true
				return e
			}()},
		},
		{
			name: "an older headless export leaves this one without a VIP",
			others: []record.Export{func() record.Export {
				e := export("west", older)
				e.Type = mcsv1beta1.Headless
				return e
			}()},
		},
		{
			name:      "an exhausted block is an error the user can act on",
			v4:        exhausted(),
			exhausted: true, err: "ClusterSetIP block exhausted", used: 3,
		},
		{
			name: "a family without a block has no VIP",
			own:  func(e *record.Export) { e.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} },
			err:  "no IPv6 ClusterSetIP block is configured",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.v4 == nil {
				tc.v4 = allocator("243.1.0.0/16")
			}
			allocators := map[corev1.IPFamily]*vipalloc.Allocator{corev1.IPv4Protocol: tc.v4}
			if tc.v6 != nil {
				allocators[corev1.IPv6Protocol] = tc.v6
			}
			own := export(testCluster, exportCreated.Time)
			if tc.own != nil {
				tc.own(&own)
			}
			got, err := newVIPBook(allocators, testRule).chooseVIPs(own, tc.others)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("chooseVIPs: %v", err)
			case tc.err != "" && err == nil:
				t.Fatalf("chooseVIPs gave no error, want one saying %q", tc.err)
			case tc.err != "":
				wantMessage(t, err.Error(), tc.err)
			}
			if errors.Is(err, errVIPExhausted) != tc.exhausted {
				t.Fatalf("errors.Is(%v, errVIPExhausted) = %v, want %v", err, !tc.exhausted, tc.exhausted)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("VIPs %v, want %v", got, tc.want)
			}
			if n := tc.v4.Used(); n != tc.used {
				t.Fatalf("%d addresses of this cluster's block taken, want %d", n, tc.used)
			}
		})
	}
}

func TestDisabledByWinner(t *testing.T) {
	optedOut := export("west", exportCreated.Time)
	optedOut.ClusterSetIPDisabled = true
	for _, tc := range []struct {
		name   string
		oldest string
		others []record.Export
		want   bool
	}{
		{"the oldest export that opted out disables VIPs", "west", []record.Export{optedOut, export("north", exportCreated.Time)}, true},
		{"the oldest export that did not opt out leaves VIPs on", "north", []record.Export{optedOut, export("north", exportCreated.Time)}, false},
		{"an opt-out that is not the oldest's does not count", "east", []record.Export{optedOut}, false},
		{"no other exports leave VIPs on", "east", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := disabledByWinner(merge.Result{Oldest: tc.oldest}, tc.others); got != tc.want {
				t.Fatalf("disabledByWinner = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVIPBookTracksWhatTheRecordsHold(t *testing.T) {
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		name string
		run  func(b *vipBook, a *vipalloc.Allocator) error
		used int
	}{
		{"an address a record holds is never handed out", func(b *vipBook, a *vipalloc.Allocator) error {
			b.observe("shop.cart.west", vipalloc.Holding{}, nil, []string{"243.1.0.1"})
			if got, err := a.Allocate(); err != nil || got == ip("243.1.0.1") {
				return fmt.Errorf("allocated %v (%v) while a record holds 243.1.0.1", got, err)
			}
			return nil
		}, 2},
		{"an address is freed once the last record holding it goes", func(b *vipBook, a *vipalloc.Allocator) error {
			b.observe("shop.cart.west", vipalloc.Holding{}, nil, []string{"243.1.0.1"})
			b.observe("shop.cart.east", vipalloc.Holding{}, nil, []string{"243.1.0.1"})
			b.observe("shop.cart.west", vipalloc.Holding{}, []string{"243.1.0.1"}, nil)
			if a.Used() != 1 {
				return fmt.Errorf("243.1.0.1 freed while shop.cart.east still holds it")
			}
			b.observe("shop.cart.east", vipalloc.Holding{}, []string{"243.1.0.1"}, nil)
			return nil
		}, 0},
		{"a record that changes its VIP frees the old one", func(b *vipBook, _ *vipalloc.Allocator) error {
			b.observe("shop.cart.east", vipalloc.Holding{}, nil, []string{"243.1.0.1"})
			b.observe("shop.cart.east", vipalloc.Holding{}, []string{"243.1.0.1"}, []string{"243.1.0.2"})
			return nil
		}, 1},
		{"addresses of other blocks and malformed ones are not this block's", func(b *vipBook, _ *vipalloc.Allocator) error {
			b.observe("shop.cart.west", vipalloc.Holding{}, nil, []string{"243.2.0.5", "not-an-ip"})
			return nil
		}, 0},
		{"release frees an address no record holds", func(b *vipBook, a *vipalloc.Allocator) error {
			got, err := a.Allocate()
			if err != nil {
				return err
			}
			b.release([]string{got.String()})
			return nil
		}, 0},
		{"release keeps an address a record holds", func(b *vipBook, _ *vipalloc.Allocator) error {
			b.observe("shop.cart.west", vipalloc.Holding{}, nil, []string{"243.1.0.1"})
			b.release([]string{"243.1.0.1"})
			return nil
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := allocator("243.1.0.0/16")
			b := newVIPBook(map[corev1.IPFamily]*vipalloc.Allocator{corev1.IPv4Protocol: a}, testRule)
			if err := tc.run(b, a); err != nil {
				t.Fatal(err)
			}
			if n := a.Used(); n != tc.used {
				t.Fatalf("%d addresses taken, want %d", n, tc.used)
			}
		})
	}
}

func TestSyncGivesTheExportItsClusterSetIP(t *testing.T) {
	older := exportCreated.Add(-time.Hour)
	annotated := func(v string) *mcsv1beta1.ServiceExport {
		return serviceExport(func(se *mcsv1beta1.ServiceExport) {
			se.Annotations = map[string]string{AnnotationClusterSetIP: v}
		})
	}
	withVIP := func(vips ...string) func(*record.Export) {
		return func(e *record.Export) { e.ClusterSetIPDisabled, e.VIPs = false, vips }
	}
	for _, tc := range []struct {
		name       string
		defaultOn  bool
		allocator  *vipalloc.Allocator
		export     *mcsv1beta1.ServiceExport // serviceExport(nil) when nil
		objects    []runtime.Object
		vips       []string
		status     metav1.ConditionStatus // of ClusterSetIPAllocated; "" for none
		reason     string
		message    string
		disabled   bool // the record says VIPs are off
		used       int
		conflict   string
		warningFor string // the reason of the warning event expected, if any
	}{
		{
			name: "the first exporter allocates from its own block", defaultOn: true,
			vips: []string{"243.1.0.1"}, status: metav1.ConditionTrue, reason: "Allocated", message: "ClusterSetIPs: 243.1.0.1", used: 1,
		},
		{
			name: "a later exporter adopts the VIP of the oldest record", defaultOn: true,
			objects: []runtime.Object{otherRecord("west", older, withVIP("243.2.0.5"))},
			vips:    []string{"243.2.0.5"}, status: metav1.ConditionTrue, reason: "Allocated", message: "ClusterSetIPs: 243.2.0.5",
		},
		{
			name: "the annotation turns VIPs off when the cluster has them on", defaultOn: true,
			export: annotated("false"), disabled: true,
		},
		{
			name:   "the annotation turns VIPs on when the cluster has them off",
			export: annotated("true"),
			vips:   []string{"243.1.0.1"}, status: metav1.ConditionTrue, reason: "Allocated", message: "ClusterSetIPs: 243.1.0.1", used: 1,
		},
		{
			name:   "an annotation that is not a boolean leaves the cluster's default",
			export: annotated("maybe"), disabled: true,
		},
		{
			name: "an older export with VIPs off leaves this one without and in conflict", defaultOn: true,
			objects:  []runtime.Object{otherRecord("west", older, nil)},
			conflict: string(merge.ReasonClusterSetIPConflict),
		},
		{
			name: "an exhausted block leaves the export without a VIP, and says so", defaultOn: true,
			allocator: exhausted(),
			status:    metav1.ConditionFalse, reason: "Exhausted", message: "ClusterSetIP block exhausted", used: 3,
			warningFor: "Exhausted",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.allocator
			if a == nil {
				a = allocator("243.1.0.0/16")
			}
			f := newFixture(t, func(cfg *Config) {
				withVIPs(a)(cfg)
				cfg.ClusterSetIPs = tc.defaultOn
			})
			if tc.export == nil {
				tc.export = serviceExport(nil)
			}
			f.add(append(tc.objects, tc.export, clusterIPService())...)
			f.mustSync()

			si := f.ownRecord()
			if si == nil {
				t.Fatal("no broker record: the export must be written with or without a VIP")
			}
			if !slices.Equal(si.Spec.IPs, tc.vips) {
				t.Fatalf("record IPs %v, want %v", si.Spec.IPs, tc.vips)
			}
			if got := si.Annotations[record.AnnotationClusterSetIPDisabled] == "true"; got != tc.disabled {
				t.Fatalf("record says VIPs disabled: %v, want %v", got, tc.disabled)
			}
			conds := f.conditions()
			wantCondition(t, conds, conditionReady, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
			if tc.status == "" {
				wantNoCondition(t, conds, ConditionClusterSetIP)
			} else {
				c := wantCondition(t, conds, ConditionClusterSetIP, tc.status, tc.reason)
				wantMessage(t, c.Message, tc.message)
			}
			if tc.conflict != "" {
				wantCondition(t, conds, conditionConflict, metav1.ConditionTrue, tc.conflict)
			}
			if n := a.Used(); n != tc.used {
				t.Fatalf("%d addresses of this cluster's block taken, want %d", n, tc.used)
			}
			if tc.warningFor != "" {
				wantEvent(t, f, "Warning "+tc.warningFor+" "+ConditionClusterSetIP+"=False")
			}
		})
	}
}

// wantEvent fails unless one of the events recorded starts with prefix.
func wantEvent(t *testing.T, f *fixture, prefix string) {
	t.Helper()
	var seen []string
	for e := f.event(); e != ""; e = f.event() {
		if strings.HasPrefix(e, prefix) {
			return
		}
		seen = append(seen, e)
	}
	t.Fatalf("no event %q... among %q", prefix, seen)
}

func TestSyncHandsBackTheClusterSetIPs(t *testing.T) {
	t.Run("withdrawing the export frees its VIP once the record is gone", func(t *testing.T) {
		a := allocator("243.1.0.0/16")
		f := newFixture(t, withVIPs(a))
		f.add(serviceExport(nil), clusterIPService())
		f.mustSync()
		f.settle()
		if a.Used() != 1 {
			t.Fatalf("%d addresses taken after the export, want 1", a.Used())
		}
		f.check(f.localMCS.Tracker().Delete(mcsv1beta1.SchemeGroupVersion.WithResource("serviceexports"), testNamespace, testName))
		f.settle()
		f.mustSync()
		f.settle()
		if a.Used() != 0 {
			t.Fatalf("%d addresses taken after the record went, want 0", a.Used())
		}
	})

	t.Run("a record that cannot be written hands its new VIP back", func(t *testing.T) {
		a := allocator("243.1.0.0/16")
		f := newFixture(t, withVIPs(a))
		f.add(serviceExport(nil), clusterIPService())
		f.brokerMCS.PrependReactor("create", "serviceimports", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("the broker is down")
		})
		err := f.sync()
		if err == nil {
			t.Fatal("sync succeeded although the record could not be written")
		}
		wantMessage(t, err.Error(), "creating broker record for shop/cart", "the broker is down")
		if a.Used() != 0 {
			t.Fatalf("%d addresses taken after a failed write, want 0", a.Used())
		}
		conds := f.conditions()
		c := wantCondition(t, conds, conditionReady, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed))
		wantMessage(t, c.Message, "Cannot write the export to the broker (retrying): ", "the broker is down")
		wantNoCondition(t, conds, ConditionClusterSetIP)
	})
}

// A restarted exporter must not hand out a VIP before its book has seen
// every record: its caches being synced is not enough, the record handler
// must have seen the initial list too.
func TestTheExporterStartsOnlyOnceItsVIPBookHasSeenEveryRecord(t *testing.T) {
	const records = 3000
	f := newFixture(t, withVIPs(allocator("243.1.0.0/16")))
	for i := range records {
		si := otherRecord("west", exportCreated.Time, func(e *record.Export) {
			e.Name = fmt.Sprintf("svc-%d", i)
			e.ClusterSetIPDisabled = false
			e.VIPs = []string{netip.AddrFrom4([4]byte{243, 1, byte(1 + i/250), byte(1 + i%250)}).String()}
		})
		if err := f.brokerMCS.Tracker().Add(si); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.c.Run(ctx) }()
	f.localInf.Start(ctx.Done())
	f.brokerInf.Start(ctx.Done())
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return f.c.Synced(), nil
	}); err != nil {
		t.Fatal(err)
	}
	f.c.vips.mu.Lock()
	held := len(f.c.vips.holders)
	f.c.vips.mu.Unlock()
	if held != records {
		t.Fatalf("the exporter started syncing when its VIP book held %d of %d records' VIPs", held, records)
	}
	cancel()
	<-done
}
