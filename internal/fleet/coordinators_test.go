package fleet

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// peers is a coordinator that shares its database with others whose live
// set the test changes. It never leads: the leader's sweeps are not what
// these tests look at.
type peers struct {
	mu   sync.Mutex
	live []string
}

func (p *peers) set(urls ...string) {
	p.mu.Lock()
	p.live = urls
	p.mu.Unlock()
}

func (*peers) ID() string                         { return "c-peers" }
func (*peers) Sole() bool                         { return false }
func (*peers) DeadAfter() time.Duration           { return time.Minute }
func (*peers) Leading() (store.LeaderLease, bool) { return store.LeaderLease{}, false }
func (*peers) Publish([]string)                   {}
func (*peers) Wakes() <-chan []string             { return nil }
func (*peers) Isolated() bool                     { return false }
func (p *peers) Coordinators() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.live)
}

// B139: a connected agent is sent the live coordinators whenever the set
// changes after its register.ack (a server starts, another dies), once per
// change; an agent registering after a change gets the new list in its
// register.ack and no frame.
//
// Proves B139 (docs/behaviours.md).
func TestAgentsAreToldWhenTheLiveCoordinatorsChange(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		cl := &peers{live: []string{"https://a.example.test"}}
		cfg := fastConfig()
		cfg.Cluster = cl
		h := start(t, b, options{cfg: cfg})
		_, secret := h.token(store.AgentTokenSpec{})
		c1, ack := h.connect(secret, reg{id: "a1"})
		if !slices.Equal(ack.Coordinators, []string{"https://a.example.test"}) {
			t.Fatalf("register.ack lists %v", ack.Coordinators)
		}
		h.sweeps(3)
		c1.quiet(50 * time.Millisecond) // nothing changed: nothing sent

		cl.set("https://a.example.test", "https://b.example.test")
		if got := expect[*proto.Coordinators](c1); !slices.Equal(got.Coordinators, []string{"https://a.example.test", "https://b.example.test"}) {
			t.Fatalf("coordinators frame %v", got.Coordinators)
		}
		h.sweeps(3)
		c1.quiet(50 * time.Millisecond) // told once

		cl.set("https://b.example.test")
		if got := expect[*proto.Coordinators](c1); !slices.Equal(got.Coordinators, []string{"https://b.example.test"}) {
			t.Fatalf("coordinators frame %v", got.Coordinators)
		}
		_, secret2 := h.token(store.AgentTokenSpec{})
		c2, ack2 := h.connect(secret2, reg{id: "a2"})
		if !slices.Equal(ack2.Coordinators, []string{"https://b.example.test"}) {
			t.Fatalf("register.ack after the change lists %v", ack2.Coordinators)
		}
		h.sweeps(3)
		c2.quiet(50 * time.Millisecond)
		c1.quiet(20 * time.Millisecond)
	})
}
