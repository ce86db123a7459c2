package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/kilnci/kiln"
)

// The two values of kiln_dispatch_queue_depth's status label (B65), the
// queue's two states as docs/metrics.md maps kiln's statuses onto them: pending is kiln's queued; dispatched is every job an
// agent holds (dispatched, running, recovering, cancelling).
const (
	statusPending    = "pending"
	statusDispatched = "dispatched"
)

// heldStatuses are the job statuses counted as status="dispatched": a
// recovering job still belongs to the agent that lost its connection, and
// nobody else may take it during the recovery window.
var heldStatuses = []kiln.JobStatus{kiln.JobDispatched, kiln.JobRunning, kiln.JobRecovering, kiln.JobCancelling}

// Run refreshes the queue gauges every refresh interval, and reads each
// finished run once for its duration and steps, until ctx ends.
func (m *Metrics) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.RefreshInterval)
	defer t.Stop()
	m.refreshLogged(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			m.refreshLogged(ctx)
		case id := <-m.ended:
			m.observeRun(ctx, id)
		}
	}
}

func (m *Metrics) refreshLogged(ctx context.Context) {
	if err := m.Refresh(ctx); err != nil && ctx.Err() == nil {
		m.log.Warn("metrics: refreshing the queue gauges failed; retrying on the next tick", "err", err)
	}
}

// Refresh reads the queue depth once and sets the queue gauges: both
// statuses of kiln_dispatch_queue_depth always, the per-label gauge under
// the sticky-zero rule, kiln_jobs by status. It also counts the refreshes
// in a row with too many pending jobs and warns once the backpressure is
// sustained.
func (m *Metrics) Refresh(ctx context.Context) error {
	d, err := m.deps.Queue.Depth(ctx)
	if err != nil {
		m.refreshFailure.Inc()
		return fmt.Errorf("queue depth: %w", err)
	}
	pending := d.ByStatus[kiln.JobQueued]
	held := 0
	for _, s := range heldStatuses {
		held += d.ByStatus[s]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queueDepth.WithLabelValues(statusPending).Set(float64(pending))
	m.queueDepth.WithLabelValues(statusDispatched).Set(float64(held))
	for s, n := range d.ByStatus {
		m.jobs.WithLabelValues(string(s)).Set(float64(n))
	}
	byLabel := applyStickyQueueLabels(m.everSeen, boundLabels(d.ByLabel, m.everSeen, m.cfg.MaxQueueLabels))
	for l, n := range byLabel {
		m.queueByLabel.WithLabelValues(statusPending, l).Set(float64(n))
	}
	m.backpressure(pending, d.ByKey)
	return nil
}

// backpressure is the queue.backpressure.sustained warning (B66): logged when
// the pending count reached the threshold BackpressureTicks refreshes in a
// row, once per episode, with an info line when it ends. m.mu is held.
func (m *Metrics) backpressure(pending int, byKey map[string]int) {
	if pending < m.cfg.BackpressureThreshold {
		if m.highTicks >= BackpressureTicks {
			m.log.Info("queue backpressure over", "pending", pending, "threshold", m.cfg.BackpressureThreshold)
		}
		m.highTicks = 0
		return
	}
	m.highTicks++
	if m.highTicks == BackpressureTicks {
		m.log.Warn("queue backpressure sustained: jobs are queued faster than agents take them",
			"event", "queue.backpressure.sustained", "pending", pending, "threshold", m.cfg.BackpressureThreshold,
			"refreshes", m.highTicks, "largest_queue", largestKey(byKey))
	}
}

// largestKey names the routing key with the most queued jobs, the first
// place an operator looks (which labels lack agents).
func largestKey(byKey map[string]int) string {
	best, n := "", -1
	for k, c := range byKey {
		if c > n || (c == n && k < best) {
			best, n = k, c
		}
	}
	if best == "" && n >= 0 {
		return "(no labels)"
	}
	return best
}
