package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/kilnci/kiln/internal/proto"
)

// cluster times signed push deliveries to server A to the one idle agent,
// connected to server B on the same PostgreSQL database (B146): the job
// reaches B only through the cross-server wake-up (B's redrive is an hour
// away). One delivery at a time, as in webhook. PostgreSQL only: on
// SQLite there is one server.
func (b *bench) cluster(ctx context.Context) error {
	if b.cfg.Database == "" {
		b.progress("cluster: skipped (several servers need --database postgres://…)")
		return nil
	}
	s, err := b.startStage(ctx, nil)
	if err != nil {
		return err
	}
	defer s.stop()
	other, err := b.startServer(ctx, serverOptions{database: s.dbURL, sets: []string{"queue.redrive_interval=1h"}})
	if err != nil {
		return err
	}
	defer other.stop()
	got := make(chan time.Time, 1)
	idle := make(chan struct{}, 1)
	job := func(a *agent, d *proto.Dispatch, at time.Time) {
		got <- at
		runNoop(a, d, nil, func() { idle <- struct{}{} })
	}
	a, err := dialAgent(ctx, other.wsURL(), s.token, "bench-cluster", []string{"bench"}, 1, job)
	if err != nil {
		return err
	}
	defer a.close()
	var toAgent []time.Duration
	for i := range b.cfg.Webhooks {
		t0 := time.Now()
		if err := deliver(ctx, webhookClient, s.serverProc, fmt.Sprintf("bench-cluster-%d-%s", i, randomHex(4)), pushPayload(commitSHA(i))); err != nil {
			return err
		}
		select {
		case at := <-got:
			toAgent = append(toAgent, at.Sub(t0))
		case <-ctx.Done():
			return fmt.Errorf("delivery %d: no job reached the agent on the other server: %w\n%s", i+1, ctx.Err(), s.logTail())
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("delivery %d: the job's success was not stored: %w", i+1, ctx.Err())
		}
	}
	b.add(ScenarioCluster, "webhook on server A → job received by idle agent on server B, p50", ms(percentile(toAgent, 0.5)), "ms",
		&Target{Value: 7})
	b.add(ScenarioCluster, "webhook on server A → job received by idle agent on server B, p99", ms(percentile(toAgent, 0.99)), "ms",
		&Target{Value: 27})
	return nil
}
