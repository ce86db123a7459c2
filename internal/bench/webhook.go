package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/kilnci/kiln/internal/proto"
)

// webhook times signed GitHub push deliveries, one at a time, to the one
// idle agent receiving the job they start: the server answers 202 once
// the delivery is durable, reads the workflow files at the pushed commit
// from the (fake, loopback) GitHub API, matches them, stores the run and
// pushes the job. Each push is a new commit, so no cache helps. The next
// delivery goes out once the agent's no-op job is stored as finished, so
// the agent is idle again.
func (b *bench) webhook(ctx context.Context) error {
	s, err := b.startStage(ctx, nil)
	if err != nil {
		return err
	}
	defer s.stop()
	got := make(chan time.Time, 1)
	idle := make(chan struct{}, 1)
	job := func(a *agent, d *proto.Dispatch, at time.Time) {
		got <- at
		runNoop(a, d, nil, func() { idle <- struct{}{} })
	}
	a, err := dialAgent(ctx, s.wsURL(), s.token, "bench-webhook", []string{"bench"}, 1, job)
	if err != nil {
		return err
	}
	defer a.close()

	var toAgent, to202 []time.Duration
	for i := range b.cfg.Webhooks {
		body := pushPayload(commitSHA(i))
		t0 := time.Now()
		if err := deliver(ctx, webhookClient, s.serverProc, fmt.Sprintf("bench-%d-%s", i, randomHex(4)), body); err != nil {
			return err
		}
		to202 = append(to202, time.Since(t0))
		select {
		case at := <-got:
			toAgent = append(toAgent, at.Sub(t0))
		case <-ctx.Done():
			return fmt.Errorf("delivery %d: no job reached the agent: %w\n%s", i+1, ctx.Err(), s.logTail())
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("delivery %d: the job's success was not stored: %w", i+1, ctx.Err())
		}
	}
	b.add(ScenarioWebhook, "webhook sent → 202 (durably recorded), p50", ms(percentile(to202, 0.5)), "ms", nil)
	b.add(ScenarioWebhook, "webhook sent → job received by idle agent, p50", ms(percentile(toAgent, 0.5)), "ms",
		b.pick(Target{Value: 3}, Target{Value: 5}))
	b.add(ScenarioWebhook, "webhook sent → job received by idle agent, p99", ms(percentile(toAgent, 0.99)), "ms",
		b.pick(Target{Value: 15}, Target{Value: 25}))
	return nil
}
