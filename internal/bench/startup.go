package bench

import (
	"context"
	"fmt"
	"time"
)

// startup starts the server cfg.Startups times with one local agent and
// measures exec → /ready, and /ready → the local agent registered (the
// server spawns it as a process of the same binary).
func (b *bench) startup(ctx context.Context) error {
	var ready, agent []time.Duration
	for i := range b.cfg.Startups {
		s, err := b.startServer(ctx, serverOptions{localAgents: 1})
		if err != nil {
			return err
		}
		registered, seen, err := waitAgents(ctx, s, 1)
		s.stop()
		if err != nil {
			return err
		}
		ready = append(ready, s.ready)
		agent = append(agent, registered.Sub(s.started)-s.ready)
		b.progress("   start %d: ready %.1f ms, local agent registered %.1f ms later (seen through the API %.1f ms later)",
			i+1, ms(s.ready), ms(agent[i]), ms(seen.Sub(s.started)-s.ready))
	}
	restarts, err := b.restarts(ctx)
	if err != nil {
		return err
	}
	b.add(ScenarioStartup, "server exec → /ready, median", ms(percentile(ready, 0.5)), "ms", atMost(200))
	b.add(ScenarioStartup, "server exec → /ready on its own database again (a restart), median", ms(percentile(restarts, 0.5)), "ms", atMost(200))
	b.add(ScenarioStartup, "local agent spawned → registered, median", ms(percentile(agent, 0.5)), "ms", atMost(100))
	return nil
}

// restarts times a server started again on the database it created: the
// start an operator's upgrade or restart makes, without the first start's
// schema to create.
func (b *bench) restarts(ctx context.Context) ([]time.Duration, error) {
	s, err := b.startServer(ctx, serverOptions{localAgents: 1})
	if err != nil {
		return nil, err
	}
	defer s.stop()
	var ready []time.Duration
	for i := range b.cfg.Startups {
		if err := s.restart(ctx); err != nil {
			return nil, err
		}
		ready = append(ready, s.ready)
		b.progress("   restart %d: ready %.1f ms", i+1, ms(s.ready))
	}
	return ready, nil
}

// waitAgents polls the agent list every 2 ms until n agents are connected,
// and returns when the last of them registered (its connected_at: the
// server's clock, on this host) and when the poll saw it. The two differ
// by the poll's own latency, which at a server's start is the API's
// under the start-up's load rather than the registration's.
func waitAgents(ctx context.Context, s *serverProc, n int) (registered, seen time.Time, err error) {
	for {
		agents, err := s.client.Agents(ctx)
		if err != nil {
			return time.Time{}, time.Time{}, err
		}
		connected := 0
		registered = time.Time{}
		for _, a := range agents {
			if a.Connected && a.ConnectedAt != nil {
				connected++
				if a.ConnectedAt.After(registered) {
					registered = *a.ConnectedAt
				}
			}
		}
		if connected >= n {
			return registered, time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, time.Time{}, fmt.Errorf("%d of %d agents registered: %w\n%s", connected, n, ctx.Err(), s.logTail())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
