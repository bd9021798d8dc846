package importer

import (
	"context"
	"sync"

	"golang.org/x/time/rate"
)

// DefaultCleanupRate is how many services a second the importer cleans up
// after a cluster is gone: their EndpointSlices of that cluster deleted and
// their status rewritten. The data plane has stopped serving the cluster's
// endpoints already; this only tidies the API objects, so it yields the
// client's budget to imports that change what is served.
const DefaultCleanupRate = 50

// pacer hands keys to the queue at a bounded rate, each key once however
// often it is handed to the pacer before it goes.
type pacer struct {
	limiter *rate.Limiter
	add     func(string)

	mu      sync.Mutex
	pending map[string]bool
	order   []string
	wake    chan struct{}
}

func newPacer(perSecond float64, add func(string)) *pacer {
	return &pacer{
		limiter: rate.NewLimiter(rate.Limit(perSecond), 1),
		add:     add,
		pending: map[string]bool{},
		wake:    make(chan struct{}, 1),
	}
}

// enqueue schedules keys behind those already waiting.
func (p *pacer) enqueue(keys []string) {
	p.mu.Lock()
	for _, k := range keys {
		if !p.pending[k] {
			p.pending[k] = true
			p.order = append(p.order, k)
		}
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// len is the number of keys waiting.
func (p *pacer) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.order)
}

// run releases keys until ctx ends.
func (p *pacer) run(ctx context.Context) {
	for {
		p.mu.Lock()
		if len(p.order) == 0 {
			p.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			}
			continue
		}
		p.mu.Unlock()
		if err := p.limiter.Wait(ctx); err != nil {
			return
		}
		p.mu.Lock()
		key := p.order[0]
		p.order = p.order[1:]
		delete(p.pending, key)
		p.mu.Unlock()
		p.add(key)
	}
}
