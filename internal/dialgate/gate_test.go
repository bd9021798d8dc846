package dialgate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestGate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	g := New()
	var d net.Dialer
	dial := g.Dial(d.DialContext)

	t.Run("an open gate dials at once", func(t *testing.T) {
		c, err := dial(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})
	t.Run("a closed gate holds dials until it opens", func(t *testing.T) {
		g.Observe(errors.New("broker unreachable"))
		if g.Open() {
			t.Fatal("the gate is open after a failure")
		}
		done := make(chan error, 1)
		go func() {
			c, err := dial(context.Background(), "tcp", ln.Addr().String())
			if c != nil {
				c.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("the dial went through a closed gate: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		g.Observe(errors.New("still unreachable"))
		g.Observe(nil)
		if err := <-done; err != nil {
			t.Fatalf("the held dial failed once the gate opened: %v", err)
		}
	})
	t.Run("a held dial gives up with its context", func(t *testing.T) {
		g.Observe(errors.New("broker unreachable"))
		defer g.Observe(nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := dial(ctx, "tcp", ln.Addr().String()); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
	t.Run("stopping the gate fails a dial held without an end, and every later one", func(t *testing.T) {
		g.Observe(errors.New("broker unreachable"))
		done := make(chan error, 1)
		go func() {
			_, err := dial(context.Background(), "tcp", ln.Addr().String())
			done <- err
		}()
		g.Stop()
		if err := <-done; !errors.Is(err, ErrStopped) {
			t.Fatalf("the held dial: got %v, want ErrStopped", err)
		}
		g.Observe(nil)
		if _, err := dial(context.Background(), "tcp", ln.Addr().String()); !errors.Is(err, ErrStopped) {
			t.Fatalf("a dial after Stop: got %v, want ErrStopped", err)
		}
		g.Stop() // twice is fine
	})
}

func TestARefusalIsAnAnswerAndKeepsTheGateOpen(t *testing.T) {
	g := New()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "cluster-east", errors.New("may not change an object of cluster west"))
	g.Observe(fmt.Errorf("renewing broker Lease: %w", forbidden))
	if !g.Open() {
		t.Fatal("a Forbidden answer closed the gate")
	}
	g.Observe(apierrors.NewServerTimeout(schema.GroupResource{Resource: "leases"}, "update", 1))
	if !g.Open() {
		t.Fatal("a server timeout, which the server itself sent, closed the gate")
	}
	g.Observe(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")})
	if g.Open() {
		t.Fatal("a transport error left the gate open")
	}
	g.Observe(forbidden)
	if !g.Open() {
		t.Fatal("an answer after a transport error did not open the gate")
	}
}
