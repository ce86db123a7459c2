package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent/agenttest"
	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/proto"
)

func TestMain(m *testing.M) {
	// Tests that run real jobs re-execute this binary as the executor's
	// step supervisor.
	executor.MaybeRunShim()
	goleak.VerifyTestMain(m)
}

// fakeRunner runs jobs whose steps are tiny scripts, so that tests decide
// exactly what a job reports and when it ends:
//
//	lines N     N stdout lines, in batches of 50
//	block       wait until released (release) or cancelled
//	fail        the step fails, and with it the job
//	output k=v  set a job output
type fakeRunner struct {
	started chan *fakeExec
}

func newFakeRunner() *fakeRunner { return &fakeRunner{started: make(chan *fakeExec, 64)} }

func (r *fakeRunner) Prepare(d *proto.Dispatch) (Prepared, error) {
	if len(d.Spec.Steps) == 0 {
		return nil, errors.New("the job has no steps")
	}
	return &fakePrepared{r: r, d: d}, nil
}

type fakePrepared struct {
	r *fakeRunner
	d *proto.Dispatch
}

func (p *fakePrepared) Start(ctx context.Context, sink Sink) Execution {
	x := &fakeExec{
		d: p.d, sink: sink, release: make(chan struct{}), cancelled: make(chan struct{}),
		forces: make(chan bool, 16), done: make(chan struct{}),
	}
	go x.run(ctx)
	p.r.started <- x
	return x
}

type fakeExec struct {
	d       *proto.Dispatch
	sink    Sink
	release chan struct{}
	forces  chan bool // every Cancel's force flag

	once      sync.Once
	cancelled chan struct{}
	done      chan struct{}
	res       Result
}

func (x *fakeExec) Cancel(force bool) {
	x.forces <- force
	x.once.Do(func() { close(x.cancelled) })
}
func (x *fakeExec) Done() <-chan struct{} { return x.done }
func (x *fakeExec) Wait() Result          { <-x.done; return x.res }

// Release lets a blocked step finish.
func (x *fakeExec) Release() { close(x.release) }

func (x *fakeExec) run(ctx context.Context) {
	defer close(x.done)
	x.res = Result{Status: kiln.JobSuccess, Outputs: map[string]string{}}
	for i, s := range x.d.Spec.Steps {
		x.sink.Step(proto.StepStatus{Index: i, Name: s.Name, Status: kiln.StepRunning, Attempt: 1})
		status := kiln.StepSuccess
		verb, arg, _ := strings.Cut(s.Run, " ")
		switch verb {
		case "lines":
			n, _ := strconv.Atoi(arg)
			emitLines(x.sink, i, 1, n, 50)
		case "block":
			select {
			case <-x.release:
			case <-x.cancelled:
				status = kiln.StepCancelled
			case <-ctx.Done():
				status = kiln.StepCancelled
			}
		case "fail":
			status = kiln.StepFailed
		case "output":
			k, v, _ := strings.Cut(arg, "=")
			x.res.Outputs[k] = v
		}
		code := 0
		if status == kiln.StepFailed {
			code = 1
		}
		x.sink.Step(proto.StepStatus{Index: i, Name: s.Name, Status: status, Attempt: 1, ExitCode: &code})
		switch status {
		case kiln.StepFailed:
			x.res = Result{Status: kiln.JobFailed, Error: fmt.Sprintf("step %s failed", s.Name)}
			return
		case kiln.StepCancelled:
			x.res = Result{Status: kiln.JobCancelled}
			return
		}
	}
}

// emitLines reports lines first..first+n-1 of a step in batches.
func emitLines(sink Sink, step int, first, n, batch int) {
	for done := 0; done < n; {
		k := min(batch, n-done)
		lines := make([]proto.LogLine, k)
		for j := range lines {
			seq := uint64(first + done + j)
			lines[j] = proto.LogLine{Seq: seq, Stream: proto.StreamStdout, Text: "line " + strconv.FormatUint(seq, 10), TimeMS: 1}
		}
		sink.Log(step, lines)
		done += k
	}
}

// harness runs one agent against a test orchestrator.
type harness struct {
	orch   *agenttest.Orchestrator
	runner *fakeRunner
	drain  chan struct{}
	stop   context.CancelFunc
	done   chan error
	waits  chan time.Duration // every reconnect delay
}

// testConfig is a Config with short intervals; heartbeats are off unless a
// test asks for them through the register.ack.
func testConfig(t *testing.T, orch *agenttest.Orchestrator, runner Runner) Config {
	return Config{
		Server: orch.URL(), Token: "kat_test", StateDir: t.TempDir(), Labels: []string{"Docker", "big"},
		MaxJobs: 2, Hostname: "build-host", Version: "1.2.3",
		HeartbeatInterval: time.Hour, JobHeartbeatInterval: time.Hour,
		MinReconnectDelay: time.Millisecond, MaxReconnectDelay: 8 * time.Millisecond,
		StopTimeout: 5 * time.Second,
		Runner:      runner,
		Logger:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func startAgent(t *testing.T, orch *agenttest.Orchestrator, mutate func(*Config)) *harness {
	t.Helper()
	h := &harness{orch: orch, runner: newFakeRunner(), drain: make(chan struct{}), done: make(chan error, 1), waits: make(chan time.Duration, 1000)}
	cfg := testConfig(t, orch, h.runner)
	cfg.Drain = h.drain
	cfg.waitHook = func(d time.Duration) {
		select {
		case h.waits <- d:
		default:
		}
	}
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, stop := context.WithCancel(context.Background())
	h.stop = stop
	go func() { h.done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-h.done:
		case <-time.After(agenttest.Timeout):
			t.Error("the agent did not stop")
		}
	})
	return h
}

// wait waits for Run to return.
func (h *harness) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-h.done:
		h.done <- err // for the cleanup
		return err
	case <-time.After(agenttest.Timeout):
		t.Fatal("the agent did not return")
		return nil
	}
}

// delay waits for the agent's next reconnect delay.
func (h *harness) delay(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-h.waits:
		return d
	case <-time.After(agenttest.Timeout):
		t.Fatal("the agent did not retry")
		return 0
	}
}

// exec waits for the runner to start the next job.
func (h *harness) exec(t *testing.T) *fakeExec {
	t.Helper()
	select {
	case x := <-h.runner.started:
		return x
	case <-time.After(agenttest.Timeout):
		t.Fatal("no job started")
		return nil
	}
}

// connect accepts the agent's next connection and registers it.
func (h *harness) connect(t *testing.T, ack proto.RegisterAck) (*agenttest.Conn, *proto.Register) {
	t.Helper()
	c := h.orch.Accept(t)
	_, reg := c.Handshake(t, ack)
	return c, reg
}

func dispatch(id string, epoch int64, steps ...string) *proto.Dispatch {
	d := &proto.Dispatch{JobID: id, RunID: "run-1", LeaseEpoch: epoch, Attempt: 1, Spec: proto.JobSpec{Name: id}}
	for i, s := range steps {
		d.Spec.Steps = append(d.Spec.Steps, proto.Step{Name: fmt.Sprintf("s%d", i), Run: s})
	}
	return d
}

func forceOf(t *testing.T, x *fakeExec) bool {
	t.Helper()
	select {
	case f := <-x.forces:
		return f
	case <-time.After(agenttest.Timeout):
		t.Fatal("the job was not cancelled")
		return false
	}
}

// expectAck waits for the next job.ack, skipping agent.status frames (sent
// directly, so they may come before it).
func expectAck(t *testing.T, c *agenttest.Conn) *proto.JobAck {
	t.Helper()
	for {
		f := c.Next(t)
		switch m := f.Msg.(type) {
		case *proto.JobAck:
			return m
		case *proto.AgentStatus:
		default:
			t.Fatalf("got %s %+v, want job.ack", f.Type(), f.Msg)
		}
	}
}
