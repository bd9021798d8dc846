package importer

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestPacerReleasesEachKeyOnceInOrder(t *testing.T) {
	got := make(chan string, 10)
	p := newPacer(1000, func(k string) { got <- k })
	p.enqueue([]string{"a/1", "a/2", "a/1"})
	p.enqueue([]string{"a/2", "a/3"})
	if n := p.len(); n != 3 {
		t.Fatalf("%d keys waiting, want 3 (duplicates merged)", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go p.run(ctx)
	var order []string
	for range 3 {
		select {
		case k := <-got:
			order = append(order, k)
		case <-time.After(30 * time.Second):
			t.Fatalf("released %v only", order)
		}
	}
	if !slices.Equal(order, []string{"a/1", "a/2", "a/3"}) {
		t.Fatalf("released %v", order)
	}
}

func TestPacerHoldsTheRate(t *testing.T) {
	// At 1 key per hour, the first key goes at once (burst 1) and the
	// second waits: the rate, not the number of keys, sets the pace.
	got := make(chan string, 10)
	p := newPacer(1.0/3600, func(k string) { got <- k })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go p.run(ctx)
	p.enqueue([]string{"a/1", "a/2"})
	if k := <-got; k != "a/1" {
		t.Fatalf("first released %q", k)
	}
	select {
	case k := <-got:
		t.Fatalf("%q released ahead of the rate", k)
	default:
	}
	if n := p.len(); n != 1 {
		t.Fatalf("%d keys waiting, want 1", n)
	}
}
