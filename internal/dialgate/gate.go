// Package dialgate holds back new connections to a server that is known to
// be down, until it is known to be up again. mcsd's broker informers dial
// through a gate that the heartbeat opens and closes: while the broker is
// down their reconnects wait at the gate instead of failing, so client-go's
// reflectors do not grow their retry backoff (up to a minute with jitter)
// and relist as soon as the heartbeat reaches the broker again. Connections
// already open are left alone; only new dials wait.
package dialgate

import (
	"context"
	"errors"
	"net"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// DialFunc dials like net.Dialer.DialContext.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// ErrStopped is the error of a dial through a stopped gate.
var ErrStopped = errors.New("dialgate: stopped; no new connections")

// Gate is open or closed; it starts open.
type Gate struct {
	mu sync.Mutex
	// open is closed while the gate is open; a closed gate has a fresh,
	// open channel that dials wait on.
	open chan struct{}
	// stopped is closed by Stop.
	stopped  chan struct{}
	stopOnce sync.Once
}

// New returns an open gate.
func New() *Gate {
	g := &Gate{open: make(chan struct{}), stopped: make(chan struct{})}
	close(g.open)
	return g
}

// Stop fails every dial waiting at the gate and every later one, for
// shutting down: a request made with a context that never ends (the
// mcs-api informers' list and watch use context.TODO) would otherwise
// wait at a closed gate for ever, and its informer with it.
func (g *Gate) Stop() {
	g.stopOnce.Do(func() { close(g.stopped) })
}

// Observe opens the gate when the server answered and closes it when it
// did not. Any answer counts, a refusal too: an API error (Forbidden,
// Conflict, a server timeout...) proves the server is there, and closing
// the gate on it would stall every informer behind the gate for as long as
// something refuses one request, such as another member squatting this
// cluster's Lease.
func (g *Gate) Observe(err error) {
	if answered(err) {
		err = nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open: // open
		if err != nil {
			g.open = make(chan struct{})
		}
	default: // closed
		if err == nil {
			close(g.open)
		}
	}
}

func answered(err error) bool {
	var status apierrors.APIStatus
	return err != nil && errors.As(err, &status)
}

// Open reports whether the gate is open.
func (g *Gate) Open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		return true
	default:
		return false
	}
}

// Dial wraps dial: each new connection first waits until the gate is open,
// ctx ends or the gate is stopped.
func (g *Gate) Dial(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		select {
		case <-g.stopped:
			return nil, ErrStopped
		default:
		}
		select {
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-g.stopped:
			return nil, ErrStopped
		}
		return dial(ctx, network, address)
	}
}
