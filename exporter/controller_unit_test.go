package exporter

import (
	"context"
	"errors"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller"
	"github.com/mcsd-io/mcsd/internal/record"
)

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"a config without a cluster ID is refused", Config{Shared: controller.Shared{BrokerNamespace: testBrokerNS}}},
		{"a config without a broker namespace is refused", Config{Shared: controller.Shared{ClusterID: testCluster}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			if _, err := New(tc.cfg, f.localInf, f.brokerInf); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}

	t.Run("defaults fill what a complete config leaves out", func(t *testing.T) {
		c := newFixture(t, nil).c
		if c.cfg.Workers != 4 || c.cfg.Metrics == nil || c.cfg.Clock == nil || c.cfg.Recorder == nil {
			t.Fatalf("config after New: %+v", c.cfg)
		}
	})
}

func TestEventsEnqueueTheServiceTheyConcern(t *testing.T) {
	brokerSlice := brokerSlices(testCluster, testNamespace, testName, []*discoveryv1.EndpointSlice{localSlice("cart-a")})[0]
	for _, tc := range []struct {
		name    string
		enqueue func(c *Controller)
		want    string // "" for nothing enqueued
	}{
		{"a local slice of a Service enqueues the Service", func(c *Controller) { c.enqueueLocalSlice(localSlice("cart-a")) }, testKey},
		{"a deleted local slice seen late enqueues the Service", func(c *Controller) {
			c.enqueueLocalSlice(cache.DeletedFinalStateUnknown{Key: "shop/cart-a", Obj: localSlice("cart-a")})
		}, testKey},
		{"a slice without a Service name, such as an imported one, enqueues nothing", func(c *Controller) {
			s := localSlice("imported")
			delete(s.Labels, discoveryv1.LabelServiceName)
			c.enqueueLocalSlice(s)
		}, ""},
		{"a broker slice enqueues the service its labels name", func(c *Controller) { c.EnqueueService(brokerSlice) }, testKey},
		{"a broker object without service labels enqueues nothing", func(c *Controller) {
			c.EnqueueService(&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: testBrokerNS, Name: "stray"}})
		}, ""},
		{"a ServiceExport enqueues itself", func(c *Controller) { c.EnqueueObject(serviceExport(nil)) }, testKey},
		{"another cluster's record enqueues its service", func(c *Controller) {
			c.onRecord(nil, otherRecord("west", exportCreated.Time, nil))
		}, testKey},
		{"a deleted record enqueues its service", func(c *Controller) {
			c.onRecord(otherRecord("west", exportCreated.Time, nil), nil)
		}, testKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFixture(t, nil).c
			tc.enqueue(c)
			if tc.want == "" {
				if n := c.Queue.Len(); n != 0 {
					t.Fatalf("%d keys enqueued, want none", n)
				}
				return
			}
			if n := c.Queue.Len(); n != 1 {
				t.Fatalf("%d keys enqueued, want 1", n)
			}
			if key, _ := c.Queue.Get(); key != tc.want {
				t.Fatalf("enqueued %q, want %q", key, tc.want)
			}
		})
	}
}

func TestObserveBrokerSyncsEveryExportWhenTheBrokerAnswersAgain(t *testing.T) {
	f := newFixture(t, nil)
	other := serviceExport(func(se *mcsv1beta1.ServiceExport) { se.Name = "other" })
	f.add(serviceExport(nil), other, otherRecord("west", exportCreated.Time, nil))
	own := otherRecord(testCluster, exportCreated.Time, func(e *record.Export) { e.Name = "gone" })
	f.add(own)
	f.c.MarkSynced()
	drain(f.c) // what the records' events enqueued

	f.c.ObserveBroker(nil)
	if n := f.c.Queue.Len(); n != 0 {
		t.Fatalf("a broker that answers as before enqueued %d keys", n)
	}
	f.c.ObserveBroker(errors.New("the broker is down"))
	if n := f.c.Queue.Len(); n != 0 {
		t.Fatalf("a broker that fails enqueued %d keys", n)
	}
	f.c.ObserveBroker(nil)
	got := drain(f.c)
	// Every export, and this cluster's records of services no longer
	// exported (to withdraw them).
	for _, want := range []string{testKey, "shop/other", "shop/gone"} {
		if !got[want] {
			t.Fatalf("enqueued %v, want %s among them", got, want)
		}
	}
}

// drain takes every key off the controller's queue.
func drain(c *Controller) map[string]bool {
	got := map[string]bool{}
	for c.Queue.Len() > 0 {
		key, _ := c.Queue.Get()
		got[key] = true
		c.Queue.Done(key)
	}
	return got
}

// A broker slice of this cluster that appears in the broker informer's
// cache (made elsewhere, or left from before and seen late) is checked
// at once, not at the next local change or resync.
func TestABrokerSliceThatAppearsIsChecked(t *testing.T) {
	f := newFixture(t, nil)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	f.brokerInf.Start(ctx.Done())
	inf := f.brokerInf.OwnSlices()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the broker slice informer did not sync")
	}
	s := brokerSlices(testCluster, testNamespace, testName, []*discoveryv1.EndpointSlice{localSlice("cart-a")})[0]
	s.Namespace = testOwnNS
	if _, err := f.broker.DiscoveryV1().EndpointSlices(testOwnNS).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return f.c.Queue.Len() > 0, nil
	}); err != nil {
		t.Fatal("a broker slice that appeared enqueued nothing")
	}
	if key, _ := f.c.Queue.Get(); key != testKey {
		t.Fatalf("enqueued %q, want %q", key, testKey)
	}
}
