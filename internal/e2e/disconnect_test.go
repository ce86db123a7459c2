package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/waittest"
)

// heldWorkflow is a job that holds its agent until it is lost (and fails
// then: on_agent_lost: fail), writing its shell's pid into pids, and a job
// waiting on it.
func heldWorkflow(pids string) string {
	return `on: push
jobs:
  held:
    runs_on: [held]
    on_agent_lost: fail
    steps:
      - run: echo ` + selfPid + ` > ` + pids + `/held.pid; echo holding; sleep 600
  waiter:
    needs: [held]
    runs_on: [held]
    steps:
      - run: echo never
`
}

// rawHolder registers a hand-driven agent offering "held", takes the
// dispatched job, and (when start) acknowledges it and reports it running.
func rawHolder(t testing.TB, s *kilnServer, secret string, start bool) (*rawAgent, *proto.Dispatch) {
	t.Helper()
	r := dialRaw(t, s.URL)
	r.handshake(secret, "raw-holder", "held")
	d := expectFrame[*proto.Dispatch](r)
	if start {
		r.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch})
		r.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobRunning, Time: time.Now()})
	}
	return r, d
}

// waitStep waits until the held step runs (its pid file is written).
func waitStep(t testing.TB, pids string) {
	t.Helper()
	waittest.UntilState(t, 30*time.Second, "the held step to run", func() (bool, string) {
		return readPids(t, pids)["held"] != 0, ""
	})
}

// Every way an agent's connection ends — its heartbeat stops, its token
// is revoked, it never acknowledges a dispatch, it breaks the protocol —
// releases what waits on the job it held once that job fails: the job
// waiting on it is skipped, the run finishes, and a viewer following the
// job's log is let go. (The socket simply closing, kill -9, is
// TestAgentKilledMidStepStepsDieAndJobsFollowOnAgentLost.)
//
// B48: every disconnect path reaches the release.
func TestEveryDisconnectPathReleasesWhatWaitsOnTheFailedJob(t *testing.T) {
	t.Parallel()
	paths := []struct {
		name string
		cfg  func(*server.Config)
		// lose starts the agent, waits for it to hold the job, and cuts
		// it off; it returns what the failed job's error must say.
		lose func(t *testing.T, s *kilnServer, runID, pids, secret, tokenID string) string
		// stepsDie: the agent process ended, so its step must be gone.
		stepsDie bool
	}{
		{name: "heartbeat timeout", cfg: func(c *server.Config) {
			c.Agents.UnhealthyAfter, c.Agents.DropAfter = time.Second, 2500*time.Millisecond
		}, lose: func(t *testing.T, s *kilnServer, runID, pids, secret, _ string) string {
			a := startAgent(t, s.URL, secret, agentOpts{id: "held", labels: "held"})
			waitStep(t, pids)
			a.signal(t, syscall.SIGSTOP)
			return "on_agent_lost: fail"
		}},
		{name: "token revoked", lose: func(t *testing.T, s *kilnServer, runID, pids, secret, tokenID string) string {
			a := startAgent(t, s.URL, secret, agentOpts{id: "held", labels: "held"})
			waitStep(t, pids)
			if err := s.Client.RevokeToken(bg, tokenID); err != nil {
				t.Fatal(err)
			}
			if code := a.wait(t, 30*time.Second); code != 1 {
				t.Errorf("the agent whose token was revoked exited %d, want 1", code)
			}
			waitLog(t, a, "the agent token was revoked")
			return "on_agent_lost: fail"
		}, stepsDie: true},
		{name: "ack timeout", cfg: func(c *server.Config) { c.Queue.MaxAttempts = 1 },
			lose: func(t *testing.T, s *kilnServer, _, _, secret, _ string) string {
				r, _ := rawHolder(t, s, secret, false)
				if _, code, _ := r.refused(); code != proto.CloseDispatchAckLate {
					t.Errorf("close %d, want %d", code, proto.CloseDispatchAckLate)
				}
				return "attempt"
			}},
		{name: "protocol error", lose: func(t *testing.T, s *kilnServer, _, _, secret, _ string) string {
			r, _ := rawHolder(t, s, secret, true)
			r.write(websocket.MessageText, []byte(`{"type":"job.status",`))
			if _, code, _ := r.refused(); code != proto.CloseInvalidMessage {
				t.Errorf("close %d, want %d", code, proto.CloseInvalidMessage)
			}
			return "on_agent_lost: fail"
		}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			var opts []func(*server.Config)
			if p.cfg != nil {
				opts = append(opts, p.cfg)
			}
			s := startServer(t, opts...)
			pids := t.TempDir()
			killLeftovers(t, pids)
			localRun(t, s, map[string]string{"held": heldWorkflow(pids)})
			secret, tokenID := agentToken(t, s.Client, api.CreateTokenRequest{})
			run := triggerOne(t, s.Client, "app")

			follow := make(chan error, 1)
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			go func() {
				follow <- s.Client.FollowLogs(ctx, run.ID, "held", func(api.LogLine) error { return nil })
			}()
			why := p.lose(t, s, run.ID, pids, secret, tokenID)

			if p.stepsDie {
				waittest.UntilState(t, 10*time.Second, "the lost agent's step to be gone", func() (bool, string) {
					pid := readPids(t, pids)["held"]
					return pid != 0 && !alive(pid), fmt.Sprint("pid ", pid)
				})
			}
			run = waitRun(t, s.Client, run.ID, time.Minute)
			held, waiter := mustJob(t, run, "held"), mustJob(t, run, "waiter")
			t.Logf("the lost job: %s %q", held.Status, held.Error)
			if held.Result != kiln.ResultFailure || !strings.Contains(held.Error, why) {
				t.Fatalf("the lost job: %s, want a failure saying %q", describeRun(run), why)
			}
			if waiter.Status != kiln.JobSkipped || run.Status != kiln.RunFailed || waiter.AgentID != "" {
				t.Fatalf("the waiting job was not released: %s", describeRun(run))
			}
			select {
			case err := <-follow:
				if err != nil {
					t.Fatalf("the log follower ended with %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the log follower was not let go after the job failed")
			}
			if q, err := s.Client.Queue(bg, 0); err != nil || len(q.Waiting) != 0 {
				t.Fatalf("queue after the run: %+v %v", q, err)
			}
		})
	}
}

// A dispatch the agent never acknowledges: after the ack timeout the
// orchestrator closes that agent's socket with 4031 and requeues the job,
// which a real agent then runs — under a new lease, so the silent agent
// could not report on it any more.
// Proves B30 (docs/behaviours.md).
func TestUnacknowledgedDispatchIsRequeuedToAnotherAgent(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	localRun(t, s, map[string]string{"held": `on: push
jobs:
  held:
    runs_on: [held]
    steps:
      - run: echo ran
`})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	run := triggerOne(t, s.Client, "app")
	mute, d := rawHolder(t, s, secret, false)
	sent := time.Now()
	// A real agent connects meanwhile; the job is not its until the
	// silent agent's ack deadline passes.
	startAgent(t, s.URL, secret, agentOpts{id: "real", labels: "held"})
	e, code, reason := mute.refused()
	// The deadline runs from when the job was claimed, a little before
	// the dispatch arrived here: allow for that, not for an early close.
	if code != proto.CloseDispatchAckLate || time.Since(sent) < s.Config.Agents.AckTimeout-time.Second {
		t.Fatalf("closed %d %q (error %+v) after %s; want %d after the ack timeout", code, reason, e, time.Since(sent), proto.CloseDispatchAckLate)
	}
	run = waitRun(t, s.Client, run.ID, time.Minute)
	j := mustJob(t, run, "held")
	if run.Status != kiln.RunSuccess || j.AgentID != "real" || j.Attempt != d.LeaseEpoch+1 || j.Dispatches != 2 {
		t.Fatalf("%s (attempt %d, dispatches %d)", describeRun(run), j.Attempt, j.Dispatches)
	}
}
