package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/kilnci/kiln/internal/api"
)

// serverMemory is what the server's /metrics says about its memory.
type serverMemory struct {
	heapStack, rss, goroutines float64
}

func (s *serverProc) memory(ctx context.Context) (serverMemory, error) {
	var m serverMemory
	sc, err := s.scrape(ctx)
	if err != nil {
		return m, err
	}
	var heap, stack float64
	for name, into := range map[string]*float64{
		"go_memstats_heap_inuse_bytes": &heap, "go_memstats_stack_inuse_bytes": &stack,
		"process_resident_memory_bytes": &m.rss, "go_goroutines": &m.goroutines,
	} {
		if *into, err = sc.sum(name); err != nil {
			return m, err
		}
	}
	m.heapStack = heap + stack
	return m, nil
}

// settled samples the server's memory a few times, 200 ms apart, and keeps
// the lowest heap: garbage not yet collected is not memory an agent holds.
func (s *serverProc) settled(ctx context.Context) (serverMemory, error) {
	var best serverMemory
	for i := range 5 {
		m, err := s.memory(ctx)
		if err != nil {
			return m, err
		}
		if i == 0 || m.heapStack < best.heapStack {
			best.heapStack = m.heapStack
		}
		best.rss, best.goroutines = m.rss, m.goroutines
		select {
		case <-ctx.Done():
			return best, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return best, nil
}

// idle connects cfg.IdleAgents agents that register and then wait, and
// measures what each costs the server: heap and stacks in use, resident
// memory, goroutines.
func (b *bench) idle(ctx context.Context) error {
	n := b.cfg.IdleAgents
	s, err := b.startServer(ctx, serverOptions{})
	if err != nil {
		return err
	}
	defer s.stop()
	tk, err := s.client.CreateToken(ctx, api.CreateTokenRequest{Name: "bench-idle"})
	if err != nil {
		return err
	}
	before, err := s.settled(ctx)
	if err != nil {
		return err
	}
	agents, err := b.dialAgents(ctx, s, tk.Secret, "idle", n, []string{"bench"}, nil)
	if err != nil {
		return err
	}
	defer closeAgents(agents)
	for {
		active, err := s.metric(ctx, "kiln_agents_active")
		if err != nil {
			return err
		}
		if int(active) == n {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%.0f of %d idle agents registered: %w", active, n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	after, err := s.settled(ctx)
	if err != nil {
		return err
	}
	per := float64(n)
	b.add(ScenarioIdle, fmt.Sprintf("%d idle agents: server heap + stacks per agent", n),
		(after.heapStack-before.heapStack)/per/1024, "KiB", atMost(32))
	b.add(ScenarioIdle, fmt.Sprintf("%d idle agents: server resident memory per agent", n),
		(after.rss-before.rss)/per/1024, "KiB", nil)
	b.add(ScenarioIdle, fmt.Sprintf("%d idle agents: server goroutines per agent", n),
		(after.goroutines-before.goroutines)/per, "", atMost(2))
	return nil
}
