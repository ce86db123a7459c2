package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/proto"
)

// NewExecutorRunner runs jobs on this host with the executor.
func NewExecutorRunner(x *executor.Executor) Runner { return execRunner{x} }

// newDefaultRunner is the executor Run uses when Config.Runner is nil. Steps
// start from the agent's environment without its own settings: the
// executor drops every KILN_* variable as well, but the agent's token must
// not depend on one safeguard.
func newDefaultRunner(cfg Config, leaseFile string) (Runner, error) {
	xc := cfg.Executor
	xc.LeaseFile = leaseFile
	if xc.BaseEnv == nil {
		xc.BaseEnv = os.Environ()
	}
	xc.BaseEnv = withoutAgentEnv(xc.BaseEnv)
	xc.Isolation = stepIsolation(cfg)
	if xc.WorkRoot == "" {
		if err := prepareStateDir(cfg.StateDir, xc.Isolation.StepUser); err != nil {
			return nil, err
		}
		xc.WorkRoot = defaultWorkRoot(cfg.StateDir)
	}
	if xc.Isolation.Mode == executor.IsolationOff {
		cfg.Logger.Warn("steps are NOT isolated (isolation off): they can see the agent's processes and every file its user can read; see docs/security.md")
	}
	if xc.Clock == nil {
		xc.Clock = cfg.Clock
	}
	if xc.Logger == nil {
		xc.Logger = cfg.Logger
	}
	x, err := executor.New(xc)
	if err != nil {
		return nil, fmt.Errorf("start the executor: %w", err)
	}
	return NewExecutorRunner(x), nil
}

// withoutAgentEnv drops the agent's own KILN_AGENT_* settings.
func withoutAgentEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "KILN_AGENT_") {
			out = append(out, kv)
		}
	}
	return executor.SanitizeEnv(out)
}

type execRunner struct{ x *executor.Executor }

func (r execRunner) Prepare(d *proto.Dispatch) (Prepared, error) {
	job, err := jobFromDispatch(d)
	if err != nil {
		return nil, err
	}
	return &execPrepared{x: r.x, job: job, fetch: hasNeeds(d)}, nil
}

type execPrepared struct {
	x     *executor.Executor
	job   *executor.Job
	fetch bool // the job has needs whose artifacts it gets
}

func (p *execPrepared) Start(ctx context.Context, sink Sink) Execution {
	if ts, ok := sink.(interface{ Transfer() executor.Transfer }); ok && (len(p.job.Artifacts) > 0 || len(p.job.Caches) > 0 || p.fetch) {
		p.job.Transfer = ts.Transfer()
	}
	return execExecution{p.x.Start(ctx, p.job, execSink{sink})}
}

type execExecution struct{ *executor.Execution }

func (e execExecution) Wait() Result {
	r := e.Execution.Wait()
	return Result{Status: r.Status, Outputs: r.Outputs, Error: r.Error}
}

// jobFromDispatch maps a dispatched job onto the executor's Job: the
// protocol's milliseconds become durations, the checkout's credentials
// bytes. It refuses what no executor could run; the executor checks the rest
// and fails the job with the reason.
func jobFromDispatch(d *proto.Dispatch) (*executor.Job, error) {
	s := &d.Spec
	if len(s.Steps) == 0 {
		return nil, errors.New("the job has no steps")
	}
	job := &executor.Job{
		RunID: d.RunID, JobID: d.JobID, Name: s.Name,
		WorkflowEnv: s.WorkflowEnv, JobEnv: s.JobEnv,
		Contexts: s.Contexts, Secrets: s.Secrets,
		Timeout: ms(s.TimeoutMS),
	}
	if c := s.Checkout; c != nil {
		if (c.URL == "") == (c.LocalPath == "") {
			return nil, errors.New("the checkout must name exactly one of a URL and a local path")
		}
		job.Checkout = &executor.Checkout{URL: c.URL, Ref: c.Ref, SHA: c.SHA, LocalPath: c.LocalPath, Hint: c.Hint}
		if a := c.Auth; a != nil {
			job.Checkout.Auth = &executor.GitAuth{Username: a.Username, Password: a.Password}
			if a.SSHKey != "" {
				job.Checkout.Auth.SSHKey = []byte(a.SSHKey)
			}
			if a.KnownHosts != "" {
				job.Checkout.Auth.KnownHosts = []byte(a.KnownHosts)
			}
		}
	}
	for _, a := range s.Artifacts {
		job.Artifacts = append(job.Artifacts, executor.Artifact{Name: a.Name, Paths: a.Paths})
	}
	for _, c := range s.Caches {
		job.Caches = append(job.Caches, executor.Cache{Key: c.Key, Paths: c.Paths, RestoreKeys: c.RestoreKeys})
	}
	job.Steps = make([]executor.Step, len(s.Steps))
	for i, st := range s.Steps {
		if strings.TrimSpace(st.Run) == "" {
			return nil, fmt.Errorf("step %d (%s) has nothing to run", i+1, st.Name)
		}
		job.Steps[i] = executor.Step{
			Name: st.Name, Run: st.Run, Shell: st.Shell, If: st.If, Env: st.Env,
			WorkingDirectory: st.WorkingDirectory, Timeout: ms(st.TimeoutMS), ContinueOnError: st.ContinueOnError,
		}
		if r := st.Retry; r != nil {
			job.Steps[i].Retry = executor.Retry{MaxAttempts: r.MaxAttempts, Delay: ms(r.DelayMS), MaxDelay: ms(r.MaxDelayMS), Backoff: r.Backoff}
		}
	}
	return job, nil
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// execSink turns the executor's events into the agent's.
type execSink struct{ s Sink }

func (e execSink) Step(ev executor.StepEvent) {
	st := proto.StepStatus{Index: ev.Index, Name: ev.Name, Status: ev.Status, Attempt: ev.Attempt, Error: ev.Error}
	if ev.ExitCode >= 0 && ev.Status.Terminal() && ev.Attempt > 0 {
		code := ev.ExitCode
		st.ExitCode = &code
	}
	if !ev.StartedAt.IsZero() {
		t := ev.StartedAt
		st.StartedAt = &t
	}
	if !ev.FinishedAt.IsZero() {
		t := ev.FinishedAt
		st.FinishedAt = &t
	}
	e.s.Step(st)
}

func (e execSink) Log(b executor.LogBatch) {
	lines := make([]proto.LogLine, len(b.Lines))
	for i, l := range b.Lines {
		lines[i] = proto.LogLine{Seq: l.Seq, Stream: l.Stream, Text: l.Text, TimeMS: l.Time.UnixMilli()}
	}
	e.s.Log(b.StepIndex, lines)
}

// hasNeeds reports whether the job has needs (its needs context is not
// empty): only then may there be artifacts to fetch.
func hasNeeds(d *proto.Dispatch) bool {
	n, ok := d.Spec.Contexts["needs"].(map[string]any)
	return ok && len(n) > 0
}
