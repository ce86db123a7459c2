package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent/agenttest"
	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/proto"
)

// startRealAgent runs an agent with the real executor: steps run in real
// shells, supervised by this test binary (TestMain calls MaybeRunShim).
func startRealAgent(t *testing.T, orch *agenttest.Orchestrator) {
	t.Helper()
	cfg := Config{
		Server: orch.URL(), Token: "kat_real", ID: "real-1",
		MinReconnectDelay: time.Millisecond, MaxReconnectDelay: 8 * time.Millisecond,
		Executor: executor.Config{
			WorkRoot:    t.TempDir(),
			GracePeriod: 30 * time.Second,
			BaseEnv:     []string{"PATH=/usr/local/bin:/usr/bin:/bin", "FOO=bar", "KILN_AGENT_TOKEN=kat_real", "KILN_AGENT_SERVER=" + orch.URL()},
		},
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(agenttest.Timeout):
			t.Error("the agent did not stop")
		}
	})
}

func TestRealJobThroughTheExecutor(t *testing.T) {
	orch := agenttest.New(t)
	startRealAgent(t, orch)
	c := orch.Accept(t)
	c.Handshake(t, proto.RegisterAck{})
	c.SetAutoAck(true)

	d := &proto.Dispatch{JobID: "job-real", RunID: "run-9", LeaseEpoch: 3, Attempt: 1, Spec: proto.JobSpec{
		Name: "build", JobEnv: map[string]string{"GREETING": "hello"},
		Secrets: map[string]string{"TOKEN": "s3cr3t-value"},
		Steps: []proto.Step{
			{Name: "greet", Run: `echo "$GREETING from kiln"; echo oops >&2; echo "version=1.2" >> "$KILN_OUTPUT"`},
			{Name: "env", Run: `echo "token=${KILN_AGENT_TOKEN:-unset} server=${KILN_AGENT_SERVER:-unset} foo=$FOO"; echo "secret s3cr3t-value"`},
			{Name: "fail", Run: "exit 3"},
			{Name: "skipped", Run: "echo never"},
		},
	}}
	c.Send(t, d)
	c.Until(t, func(f agenttest.Frame) bool { return f.Type() == proto.TypeJobAck })
	frames := durable(t, c, "job-real")

	var steps []string
	logs := map[int][]string{}
	var exit3 bool
	for _, f := range frames {
		switch m := f.Msg.(type) {
		case *proto.StepStatus:
			if m.LeaseEpoch != 3 {
				t.Errorf("step status epoch %d", m.LeaseEpoch)
			}
			if m.Status.Terminal() {
				steps = append(steps, fmt.Sprintf("%s:%s", m.Name, m.Status))
			}
			if m.Name == "fail" && m.Status == kiln.StepFailed && m.ExitCode != nil && *m.ExitCode == 3 {
				exit3 = true
			}
		case *proto.Log:
			for _, l := range m.Lines {
				logs[m.Step] = append(logs[m.Step], l.Stream+":"+l.Text)
			}
		}
	}
	if want := []string{"greet:success", "env:success", "fail:failed", "skipped:skipped"}; !slices.Equal(steps, want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	if !exit3 {
		t.Error("the failed step's exit code 3 was not reported")
	}
	if !slices.Contains(logs[0], "stdout:hello from kiln") || !slices.Contains(logs[0], "stderr:oops") {
		t.Errorf("step 0 log %q", logs[0])
	}
	if !slices.Contains(logs[1], "stdout:token=unset server=unset foo=bar") {
		t.Errorf("the agent's settings reached a step: %q", logs[1])
	}
	if slices.ContainsFunc(logs[1], func(l string) bool { return strings.Contains(l, "s3cr3t-value") }) {
		t.Errorf("a secret reached the log: %q", logs[1])
	}
	final := frames[len(frames)-1].Msg.(*proto.JobStatus)
	if final.Status != kiln.JobFailed || final.Outputs["version"] != "1.2" || final.Error == "" {
		t.Fatalf("final %+v", final)
	}
}

func TestRealJobCancelled(t *testing.T) {
	orch := agenttest.New(t)
	startRealAgent(t, orch)
	c := orch.Accept(t)
	c.Handshake(t, proto.RegisterAck{})
	c.SetAutoAck(true)
	c.Send(t, &proto.Dispatch{JobID: "job-long", RunID: "run-9", LeaseEpoch: 1, Spec: proto.JobSpec{
		Steps: []proto.Step{{Name: "wait", Run: "echo started; sleep 60"}},
	}})
	c.Until(t, func(f agenttest.Frame) bool {
		l, ok := f.Msg.(*proto.Log)
		return ok && l.Lines[0].Text == "started"
	})
	// The grace period (30 s) is longer than any wait here: the job must
	// end by SIGTERM, as a graceful cancel sends it.
	c.Send(t, &proto.Cancel{JobID: "job-long", LeaseEpoch: 1, Reason: "user"})
	frames := durable(t, c, "job-long")
	if st := frames[len(frames)-1].Msg.(*proto.JobStatus); st.Status != kiln.JobCancelled {
		t.Fatalf("final %+v", st)
	}
}

func TestJobFromDispatch(t *testing.T) {
	d := &proto.Dispatch{JobID: "j", RunID: "r", LeaseEpoch: 1, Spec: proto.JobSpec{
		Name: "n", TimeoutMS: 90_000,
		Checkout: &proto.Checkout{URL: "https://git.example.com/a/b.git", SHA: strings.Repeat("a", 40),
			Auth: &proto.GitAuth{Username: "u", Password: "p", SSHKey: "KEY", KnownHosts: "HOSTS"}},
		Steps: []proto.Step{{Name: "s", Run: "true", TimeoutMS: 1500, Retry: &proto.Retry{MaxAttempts: 3, DelayMS: 10, MaxDelayMS: 40, Backoff: "exponential"}}},
	}}
	job, err := jobFromDispatch(d)
	if err != nil {
		t.Fatal(err)
	}
	s := job.Steps[0]
	if job.Timeout != 90*time.Second || s.Timeout != 1500*time.Millisecond ||
		s.Retry != (executor.Retry{MaxAttempts: 3, Delay: 10 * time.Millisecond, MaxDelay: 40 * time.Millisecond, Backoff: "exponential"}) {
		t.Fatalf("job %+v", job)
	}
	if a := job.Checkout.Auth; string(a.SSHKey) != "KEY" || string(a.KnownHosts) != "HOSTS" || a.Password != "p" {
		t.Fatalf("auth %+v", a)
	}
	bad := []func(*proto.JobSpec){
		func(s *proto.JobSpec) { s.Steps = nil },
		func(s *proto.JobSpec) { s.Steps[0].Run = "  \n" },
		func(s *proto.JobSpec) { s.Checkout.LocalPath = "/src" },
		func(s *proto.JobSpec) { s.Checkout.URL = "" },
	}
	for i, mutate := range bad {
		d2 := *d
		d2.Spec.Steps = slices.Clone(d.Spec.Steps)
		co := *d.Spec.Checkout
		d2.Spec.Checkout = &co
		mutate(&d2.Spec)
		if _, err := jobFromDispatch(&d2); err == nil {
			t.Errorf("case %d: no error", i)
		}
	}
}

func TestWithoutAgentEnv(t *testing.T) {
	got := withoutAgentEnv([]string{"A=1", "KILN_AGENT_TOKEN=x", "KILN_TOKEN=y", "B=2", "broken"})
	if !slices.Equal(got, []string{"A=1", "B=2"}) {
		t.Fatalf("%q", got)
	}
}
