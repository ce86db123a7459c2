package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	kilnagent "github.com/kilnci/kiln/internal/agent"
	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// End-to-end tests with the real agent (internal/agent) running real steps
// through the real executor: in-process, or as a child process killed with
// SIGKILL.

func agentConfig(t testing.TB, server, token, id string) kilnagent.Config {
	return kilnagent.Config{
		Server: server, Token: token, ID: id,
		MinReconnectDelay: 5 * time.Millisecond, MaxReconnectDelay: 50 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond, JobHeartbeatInterval: 200 * time.Millisecond,
		Executor: executor.Config{WorkRoot: t.TempDir(), GracePeriod: 5 * time.Second,
			BaseEnv: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
		Logger: testLogger(),
	}
}

// runAgent runs the real agent in this process until the test ends.
func runAgent(t *testing.T, cfg kilnagent.Config) {
	t.Helper()
	ctx, stop := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- kilnagent.Run(ctx, cfg) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the agent did not stop")
		}
	})
}

// stepsSpec is a stored spec running the given shell steps.
func stepsSpec(name string, steps ...proto.Step) json.RawMessage {
	j := jobspec.Job{Agent: proto.JobSpec{Name: name, Workflow: "ci", Steps: steps}}
	b, err := j.Encode()
	if err != nil {
		panic(err)
	}
	return b
}

// createRun creates a run of one job with the spec.
func (h *harness) createRun(name string, spec json.RawMessage, onLost store.OnAgentLost, steps ...string) (string, string) {
	h.t.Helper()
	cr, err := h.db.Runs().Create(bg, store.NewRun{Workflow: "ci", Repository: "acme/app", Source: "gh", Ref: "refs/heads/main", SHA: "abc",
		Event: json.RawMessage(`{"name":"push"}`), Jobs: []store.NewJob{{Name: name, Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("linux")},
			Spec: spec, Steps: steps, OnAgentLost: onLost}}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.eng.Apply(cr.Effects)
	return cr.ID, cr.Jobs[name]
}

// checkNumbered checks a step's stored log holds the lines 1..n exactly
// once, in order.
func checkNumbered(t testing.TB, logs *logstore.Store, ref logstore.Ref, n int) {
	t.Helper()
	lines, err := logs.Read(ref, 0, 10*n)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lines {
		if l.Stream == proto.StreamSystem {
			t.Fatalf("a system line (lost lines?) in the log: %q", l.Text)
		}
		got = append(got, l.Text)
	}
	if len(got) != n {
		t.Fatalf("stored %d lines, want %d: %q…", len(got), n, got[:min(len(got), 5)])
	}
	for i, text := range got {
		if text != fmt.Sprint(i+1) {
			t.Fatalf("line %d is %q", i+1, text)
		}
	}
}

// A real multi-step job: logs per step, a failing step continued past,
// outputs, the run's result.
func TestRealAgentRunsAJob(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{})
		runAgent(t, agentConfig(t, h.srv.URL, secret, "real-1"))
		runID, jobID := h.createRun("build", stepsSpec("build",
			proto.Step{Name: "count", Run: `for i in $(seq 1 300); do echo $i; done`},
			proto.Step{Name: "warn", Run: `echo oops >&2; exit 2`, ContinueOnError: true},
			proto.Step{Name: "out", Run: `echo "version=1.2" >> "$KILN_OUTPUT"`},
		), "", "count", "warn", "out")
		j := h.waitStatus(jobID, kiln.JobSuccess)
		if j.Outputs["version"] != "1.2" || j.AgentID != "real-1" {
			t.Fatalf("job %+v", j)
		}
		if len(j.Steps) != 3 || j.Steps[0].Status != kiln.StepSuccess || j.Steps[1].Status != kiln.StepFailed ||
			j.Steps[1].ExitCode == nil || *j.Steps[1].ExitCode != 2 || j.Steps[2].Status != kiln.StepSuccess {
			t.Fatalf("steps %+v", j.Steps)
		}
		checkNumbered(t, h.logs, logstore.Ref{RunID: runID, JobID: jobID, Epoch: 1, Step: 0}, 300)
		lines, _ := h.logs.Read(logstore.Ref{RunID: runID, JobID: jobID, Epoch: 1, Step: 1}, 0, 10)
		if len(lines) != 1 || lines[0].Text != "oops" || lines[0].Stream != proto.StreamStderr {
			t.Fatalf("step 1 log %+v", lines)
		}
		waittest.Until(t, waittest.Timeout, "the run succeeds", func() bool {
			r, _ := h.db.Runs().Get(bg, runID)
			return r.Status == kiln.RunSuccess
		})
	})
}

// The orchestrator stops while a step prints numbered lines and a new
// process starts at the same address over the same files: the real agent
// reconnects, keeps its job, replays, and the stored log holds every line
// exactly once.
func TestRealAgentSurvivesOrchestratorRestart(t *testing.T) {
	const n = 400
	dbURL, logDir := storetest.SQLiteURL(t), t.TempDir()
	sqlite := storetest.Backends[0]
	h1 := start(t, sqlite, options{cfg: fastConfig(), dbURL: dbURL, logDir: logDir})
	addr := h1.srv.Listener.Addr().String()
	_, secret := h1.token(store.AgentTokenSpec{})
	runAgent(t, agentConfig(t, h1.srv.URL, secret, "printer"))
	runID, jobID := h1.createRun("count", stepsSpec("count",
		proto.Step{Name: "count", Run: fmt.Sprintf(`for i in $(seq 1 %d); do echo $i; sleep 0.005; done`, n)}), "", "count")
	ref := logstore.Ref{RunID: runID, JobID: jobID, Epoch: 1, Step: 0}
	waittest.Until(t, waittest.Timeout, "the step is half way", func() bool {
		last, _ := h1.logs.LastSeq(ref)
		return last >= n/4
	})
	h1.stop()
	h2 := start(t, sqlite, options{cfg: fastConfig(), dbURL: dbURL, logDir: logDir, addr: addr})
	h2.waitStatus(jobID, kiln.JobSuccess)
	checkNumbered(t, h2.logs, ref, n)
	if j := h2.job(jobID); j.LeaseEpoch != 1 || j.Attempts != 1 {
		t.Fatalf("the job was dispatched again: epoch %d, attempts %d", j.LeaseEpoch, j.Attempts)
	}
}

const agentChildEnv = "KILN_FLEET_AGENT_CHILD"

// agentChild runs the real agent as this process (for SIGKILL tests); its
// config comes as JSON in the environment.
func agentChild() int {
	var c struct{ Server, Token, ID, WorkRoot string }
	if err := json.Unmarshal([]byte(os.Getenv(agentChildEnv)), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := kilnagent.Config{Server: c.Server, Token: c.Token, ID: c.ID,
		MinReconnectDelay: 5 * time.Millisecond, MaxReconnectDelay: 50 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond, JobHeartbeatInterval: 200 * time.Millisecond,
		Executor: executor.Config{WorkRoot: c.WorkRoot, BaseEnv: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, nil))}
	if err := kilnagent.Run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// kill -9 of the agent mid-step: the socket drop is noticed at once, the
// started job waits out its recovery window and is then requeued (its
// on_agent_lost is retry) to another agent — and the first attempt's step
// never runs at the same time as the second.
// Proves B53 (docs/behaviours.md).
func TestRealAgentKilledMidStep(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig(),
			store: withStore(func(c *store.Config) { c.RecoveryWindow = 500 * time.Millisecond })})
		_, secret := h.token(store.AgentTokenSpec{})
		conf, _ := json.Marshal(map[string]string{"Server": h.srv.URL, "Token": secret, "ID": "doomed", "WorkRoot": t.TempDir()})
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), agentChildEnv+"="+string(conf))
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

		marks := filepath.Join(t.TempDir(), "marks")
		// Each attempt appends "<pid> <n>" ticks; the first is killed mid-way.
		spec := stepsSpec("tick", proto.Step{Name: "tick",
			Run: fmt.Sprintf(`for i in $(seq 1 60); do echo "$$ $i" >> %s; echo $i; sleep 0.02; done`, marks)})
		_, jobID := h.createRun("tick", spec, store.AgentLostRetry, "tick")
		waittest.Until(t, waittest.Timeout, "the first attempt is ticking", func() bool {
			b, _ := os.ReadFile(marks)
			return strings.Count(string(b), "\n") >= 5
		})
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = child.Wait()
		h.waitStatus(jobID, kiln.JobRecovering) // noticed at once
		runAgent(t, agentConfig(t, h.srv.URL, secret, "survivor"))
		j := h.waitStatus(jobID, kiln.JobSuccess)
		if j.AgentID != "survivor" || j.LeaseEpoch != 2 {
			t.Fatalf("job %+v", j)
		}
		// The ticks of the two attempts do not interleave.
		f, err := os.Open(marks)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var pids []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			pid, _, _ := strings.Cut(sc.Text(), " ")
			if len(pids) == 0 || pids[len(pids)-1] != pid {
				pids = append(pids, pid)
			}
		}
		if len(pids) != 2 {
			t.Fatalf("the attempts' ticks interleave or one is missing: runs of pids %v", pids)
		}
	})
}
