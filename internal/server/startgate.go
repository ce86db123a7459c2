package server

import (
	"context"
	"sync"
	"time"
)

// A server starts in two waves. The first is what makes it useful at once:
// the fleet's recovery of the previous process's agents (ready waits for
// it), the HTTP listener, the engine, the webhook ingress, and the local
// agents' registration. The second is background work whose first pass can
// wait for those: the cluster's heartbeat, leader lease and wake-up
// listener, the sources' change listener, the scheduler, the metrics'
// gauges, the scalers, the status reporter and the garbage collector.
//
// Why: on PostgreSQL each part's first query, all in the same instant,
// opened a connection of its own — a new backend each, a fork and ~10 ms
// of catalog loading on two cores — and that burst of about ten held the
// fleet's recovery (so /ready) back by 80–100 ms on a restart, and a local
// agent's registration by as much. Every second-wave part copes with a late
// start: the listeners re-read what they may have missed when they begin,
// and the coordinator's row is written before the first wave (Join).

// startSettleMax bounds how long the second wave waits after ready for
// local agents that do not register (a broken binary, a refused token).
const startSettleMax = time.Second

// startGate opens when the server is ready and every local agent has
// registered, or startSettleMax after ready.
type startGate struct {
	open    chan struct{}
	mu      sync.Mutex
	waiting map[string]bool // local agents not registered yet
	all     chan struct{}   // closed when waiting empties
}

func newStartGate(localAgents int) *startGate {
	g := &startGate{open: make(chan struct{}), waiting: map[string]bool{}, all: make(chan struct{})}
	for i := 1; i <= localAgents; i++ {
		g.waiting[localAgentID(i)] = true
	}
	if localAgents <= 0 {
		close(g.all)
	}
	return g
}

// registered is the fleet's OnRegister hook.
func (g *startGate) registered(agentID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.waiting[agentID] {
		return
	}
	delete(g.waiting, agentID)
	if len(g.waiting) == 0 {
		close(g.all)
	}
}

// run opens the gate once ready is closed and the local agents registered,
// or max after ready, or when ctx ends. It is called once.
func (g *startGate) run(ctx context.Context, ready <-chan struct{}, max time.Duration) {
	defer close(g.open)
	select {
	case <-ready:
	case <-ctx.Done():
		return
	}
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-g.all:
	case <-t.C:
	case <-ctx.Done():
	}
}

// after wraps a part's Run so that it begins once the gate opens. A stop
// before then still runs it, with its context ended, so that a part that
// says goodbye on a stop (the cluster leaves) does.
func (g *startGate) after(ctx context.Context, run func(context.Context) error) func() error {
	return func() error {
		select {
		case <-g.open:
		case <-ctx.Done():
		}
		return run(ctx)
	}
}
