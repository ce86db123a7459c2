package metrics_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/store"
)

const agentWorkflow = `
on: push
jobs:
  build:
    runs_on: [metrics-e2e]
    steps:
      - name: greet
        run: echo hello
      - name: count
        run: printf '1\n2\n3\n'
`

// A real agent connects over /ws and runs a job: the fleet's series (agents,
// dispatch and ack latency, frames, log lines, group commit) and the run's
// counters (executions, jobs, steps, duration) move.
// Proves B62 (docs/behaviours.md).
func TestAgentRunThroughTheServer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, database func(testing.TB) string) {
		s := startServer(t, database(t), server.Options{
			// The run has no source to clone: the job runs in an empty workspace.
			CloneCredentials: noCheckout{},
		}, nil)
		ctx := context.Background()
		_, token, err := s.DB.Auth().CreateAgentToken(ctx, store.AgentTokenSpec{Name: "metrics test"})
		if err != nil {
			t.Fatal(err)
		}
		actx, stop := context.WithCancel(ctx)
		agentDone := make(chan error, 1)
		go func() {
			agentDone <- agent.Run(actx, agent.Config{
				Server: s.URL, Token: token, ID: "metrics-agent", Labels: []string{"metrics-e2e"},
				StateDir: t.TempDir(), MaxJobs: 1,
				Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
		}()
		t.Cleanup(func() { stop(); <-agentDone })

		scrapeUntil(t, s, "the agent registered", func(f families) bool {
			n, _ := f.value("kiln_agents_active")
			return n == 1
		})
		run := startRun(t, s, agentWorkflow)
		f := scrapeUntil(t, s, "the run's steps and duration", func(f families) bool {
			steps, _ := f.value("kiln_steps_total", "status", "success")
			durations, _ := f.value("kiln_execution_duration_seconds")
			return steps == 2 && durations == 1
		})
		if got, err := s.DB.Runs().Get(ctx, run.ID); err != nil || got.Status != kiln.RunSuccess {
			t.Fatalf("run: %s %v", got.Status, err)
		}
		f.want(t, 1, "kiln_executions_total", "status", "success")
		f.want(t, 1, "kiln_jobs_finished_total", "status", "success")
		f.want(t, 1, "kiln_dispatches_total")
		f.want(t, 1, "kiln_dispatch_latency_seconds")
		f.want(t, 1, "kiln_dispatch_ack_latency_seconds")
		if n, _ := f.value("kiln_dispatch_claim_seconds"); n < 1 {
			t.Fatalf("kiln_dispatch_claim_seconds counted %v claims, want at least the job's", n)
		}
		f.want(t, 1, "kiln_agent_connections")
		f.want(t, 1, "kiln_agent_frames_total", "type", "job.ack")
		if n, _ := f.value("kiln_log_lines_stored_total", "source", "local"); n < 4 {
			t.Fatalf("kiln_log_lines_stored_total = %v, want at least the 4 lines the steps printed", n)
		}
		if n, _ := f.value("kiln_log_chunks_received_total", "source", "local"); n < 1 {
			t.Fatalf("kiln_log_chunks_received_total = %v, want at least 1", n)
		}
		batches, _ := f.value("kiln_store_batches_total")
		ops, _ := f.value("kiln_store_batched_ops_total")
		if batches < 1 || ops < batches {
			t.Fatalf("group commit: %v batches, %v ops", batches, ops)
		}
		refresh(t, s)
		f = scrape(t, s)
		f.want(t, 0, "kiln_dispatch_queue_depth", "status", "dispatched")
		f.want(t, 0, "kiln_dispatch_queue_depth", "status", "pending")
		if testing.Verbose() {
			_, text := scrapeText(t, s)
			var kiln []string
			for _, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(l, "kiln_") || strings.HasPrefix(l, "# HELP kiln_") || strings.HasPrefix(l, "# TYPE kiln_") {
					kiln = append(kiln, l)
				}
			}
			t.Logf("sample /metrics:\n%s", strings.Join(kiln, "\n"))
		}

		stop()
		if err := <-agentDone; err != nil {
			t.Fatalf("agent: %v", err)
		}
		agentDone <- nil // for the cleanup
		scrapeUntil(t, s, "the agent gone and its disconnect counted", func(f families) bool {
			active, _ := f.value("kiln_agents_active")
			total := 0.0
			if fam, ok := f["kiln_agent_disconnects_total"]; ok {
				for _, m := range fam.GetMetric() {
					total += m.GetCounter().GetValue()
				}
			}
			return active == 0 && total == 1
		})
	})
}

// noCheckout sends jobs without a checkout.
type noCheckout struct{}

func (noCheckout) Checkout(context.Context, jobspec.Checkout) (*proto.Checkout, error) {
	return nil, nil
}
