package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// Two jobs per run, on labels no agent has: they queue and stay queued.
const unservedWorkflow = `
on: push
jobs:
  train: {runs_on: [gpu-xl], steps: [{run: train}]}
  lint: {runs_on: [arm64-big], steps: [{run: lint}]}
`

// B63, B64 and B65 on the real /metrics output: queued
// jobs show as pending and by label; when the queue drains (one run
// cancelled, the other's jobs failed by the unroutable probe) pending and
// dispatched are 0 and both labels still report 0.
func TestQueueGaugesThroughTheServer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, database func(testing.TB) string) {
		clock := storetest.NewClock()
		s := startServer(t, database(t), server.Options{Clock: clock.Now}, nil)
		ctx := context.Background()

		f := scrape(t, s)
		f.want(t, 0, "kiln_dispatch_queue_depth", "status", "pending") // B65
		f.want(t, 0, "kiln_dispatch_queue_depth", "status", "dispatched")
		if n := f.series("kiln_dispatch_queue_depth_by_label"); n != 0 {
			t.Fatalf("%d label series before any job queued", n)
		}

		first := startRun(t, s, unservedWorkflow)
		startRun(t, s, unservedWorkflow)
		refresh(t, s)
		f = scrape(t, s)
		f.want(t, 4, "kiln_dispatch_queue_depth", "status", "pending")
		f.want(t, 0, "kiln_dispatch_queue_depth", "status", "dispatched")
		f.want(t, 2, "kiln_dispatch_queue_depth_by_label", "status", "pending", "label", "gpu-xl")
		f.want(t, 2, "kiln_dispatch_queue_depth_by_label", "status", "pending", "label", "arm64-big")
		f.want(t, 4, "kiln_jobs", "status", "queued")

		if _, err := s.Engine.Cancel(ctx, first.ID, "test"); err != nil {
			t.Fatal(err)
		}
		refresh(t, s)
		f = scrape(t, s)
		f.want(t, 2, "kiln_dispatch_queue_depth", "status", "pending")
		f.want(t, 1, "kiln_dispatch_queue_depth_by_label", "status", "pending", "label", "gpu-xl")
		f.want(t, 1, "kiln_executions_total", "status", "cancelled")
		f.want(t, 2, "kiln_jobs_finished_total", "status", "cancelled")

		// No agent was ever seen: after the grace the probe fails the rest.
		s.Engine.Sweep(ctx)
		clock.Advance(3 * time.Minute)
		s.Engine.Sweep(ctx)
		refresh(t, s)
		f = scrape(t, s)
		f.want(t, 0, "kiln_dispatch_queue_depth", "status", "pending") // B65
		f.want(t, 0, "kiln_dispatch_queue_depth", "status", "dispatched")
		f.want(t, 0, "kiln_dispatch_queue_depth_by_label", "status", "pending", "label", "gpu-xl") // B64
		f.want(t, 0, "kiln_dispatch_queue_depth_by_label", "status", "pending", "label", "arm64-big")
		f.want(t, 2, "kiln_unroutable_fast_failed_total")
		f.want(t, 2, "kiln_jobs_finished_total", "status", "unroutable")
		f.want(t, 1, "kiln_executions_total", "status", "failed")
		f.want(t, 0, "kiln_executions_total", "status", "success")
		f.want(t, 0, "kiln_jobs", "status", "queued")

		// The refresher reads each finished run once for its duration.
		scrapeUntil(t, s, "two run durations", func(f families) bool {
			n, _ := f.value("kiln_execution_duration_seconds")
			return n == 2
		})
	})
}
