package localrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/trigger"
	"github.com/kilnci/kiln/internal/workflow"
)

// Options configure a local run.
type Options struct {
	Dir          string
	Event        EventOptions
	Inputs       map[string]string // dispatch inputs, as typed on the command line
	Jobs         []string          // only these jobs and what they need
	StrictLabels bool              // the agent offers only local, OS and arch
	Out, Err     io.Writer
	// Verbose shows the orchestrator's and the agent's own logs, and every
	// line of each checkout.
	Verbose bool
	// Workflows, when set, runs only the workflows named: by path, file
	// name, file name without the extension, or name.
	Workflows []string
	// Env is added to the environment every step starts from (K=V); a
	// workflow's own env wins over it.
	Env []string
	// Colour paints kiln run's own lines (the caller decides: a terminal,
	// and NO_COLOR unset). JSON prints the result as JSON on Out and the
	// progress on Err.
	Colour, JSON bool
	// Safe makes text the workflow or its steps wrote safe to print (nil:
	// as it is).
	Safe func(string) string
}

// Exit codes (the CLI's).
const (
	ExitOK      = 0
	ExitFailed  = 1
	ExitNoMatch = 2
)

// ErrUsage wraps errors that are the caller's to fix (exit 2).
var ErrUsage = errors.New("usage")

// Run runs the matched workflows and returns the exit code: 0 when every
// run succeeded, 1 when one failed or the workflows do not lint, 2 when no
// workflow matches (the decision traces are printed).
func Run(ctx context.Context, o Options) (int, error) {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Err == nil {
		o.Err = os.Stderr
	}
	r, err := openRepo(ctx, o.Dir)
	if err != nil {
		return ExitNoMatch, errors.Join(ErrUsage, err)
	}
	wfs, err := workflow.LoadDir(r.root)
	if errors.Is(err, workflow.ErrNoWorkflows) {
		return ExitNoMatch, errors.Join(ErrUsage, fmt.Errorf("no workflows in %s/.kiln/workflows", r.root))
	}
	if err != nil {
		fmt.Fprintln(o.Err, err)
		return ExitFailed, fmt.Errorf("the workflows do not lint; fix them first (kiln lint)")
	}
	if wfs, err = only(wfs, o.Workflows); err != nil {
		return ExitNoMatch, errors.Join(ErrUsage, err)
	}
	progress := o.Out
	if o.JSON {
		progress = o.Err
	}
	ev, err := r.event(ctx, o.Event)
	if err != nil {
		return ExitNoMatch, errors.Join(ErrUsage, err)
	}
	matches, err := match(wfs, ev, o)
	if err != nil {
		return ExitNoMatch, errors.Join(ErrUsage, err)
	}
	if len(matches) == 0 {
		fmt.Fprintf(o.Err, "kiln run: no workflow matches %s\n", describeEvent(ev))
		for _, wf := range wfs {
			printDecision(o.Err, trigger.Match(wf, ev))
		}
		return ExitNoMatch, nil
	}
	fmt.Fprintf(progress, "kiln run: %s (%s) in %s\n", describeEvent(ev), short(ev.SHA), r.root)
	for _, m := range matches {
		fmt.Fprintf(progress, "  %s: %s\n", m.Workflow.Name, m.Decision.Summary)
	}
	return execute(ctx, r, ev, matches, o)
}

// describeEvent names the simulated event: "a push of branch main",
// "tag v0.1.0", "a pull_request of branch fix into main".
func describeEvent(ev *kiln.Event) string {
	switch {
	case ev.Tag != "":
		return "tag " + ev.Tag
	case ev.Name == kiln.EventPullRequest:
		return "a pull_request of branch " + ev.Branch + " into " + ev.BaseBranch
	}
	return "a " + string(ev.Name) + " of branch " + ev.Branch
}

// only keeps the workflows named (all when none is), by path, file name,
// file name without the extension, or name.
func only(wfs []*workflow.Workflow, names []string) ([]*workflow.Workflow, error) {
	if len(names) == 0 {
		return wfs, nil
	}
	var out []*workflow.Workflow
	var all []string
	for _, wf := range wfs {
		base := filepath.Base(wf.File)
		all = append(all, base)
		for _, n := range names {
			if n == wf.File || n == base || n == strings.TrimSuffix(base, filepath.Ext(base)) || n == wf.Name {
				out = append(out, wf)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no workflow named %s; the workflows are %s", strings.Join(names, " or "), strings.Join(all, ", "))
	}
	return out, nil
}

func short(sha string) string {
	if len(sha) > 9 {
		return sha[:9]
	}
	return sha
}

// match picks the workflows the event starts, with their dispatch inputs
// and the job filter.
func match(wfs []*workflow.Workflow, ev *kiln.Event, o Options) ([]engine.Match, error) {
	var out []engine.Match
	for _, wf := range wfs {
		d := trigger.Match(wf, ev)
		if !d.Matched {
			continue
		}
		m := engine.Match{Workflow: wf, Decision: d}
		if ev.Name == kiln.EventDispatch {
			given := map[string]any{}
			for k, v := range o.Inputs {
				given[k] = v
			}
			in, err := trigger.CoerceInputs(wf.On.Dispatch, given)
			if err != nil {
				return nil, fmt.Errorf("%s: %s", wf.Name, kiln.ErrorMessage(err))
			}
			m.Inputs = in
		}
		if len(o.Jobs) > 0 {
			for _, j := range o.Jobs {
				if wf.Job(j) != nil {
					m.Jobs = append(m.Jobs, j)
				}
			}
			if len(m.Jobs) == 0 {
				continue
			}
		}
		out = append(out, m)
	}
	if len(o.Jobs) > 0 && len(out) == 0 {
		return nil, fmt.Errorf("no matched workflow has a job named %s", strings.Join(o.Jobs, " or "))
	}
	return out, nil
}

func printDecision(w io.Writer, d trigger.Decision) {
	fmt.Fprintf(w, "  %s (%s): %s\n", d.Workflow, d.File, d.Summary)
	for _, c := range d.Checks {
		mark := "fail"
		if c.Passed {
			mark = "pass"
		}
		fmt.Fprintf(w, "    %s  %-24s %s\n", mark, c.Check, c.Reason)
	}
}

// agentLabels is what the local agent offers: local plus, unless strict,
// every label a matched job asks for, so runs_on never strands a job here.
func agentLabels(matches []engine.Match, strict bool) []string {
	labels := []string{"local"}
	if strict {
		return labels
	}
	for _, m := range matches {
		for _, j := range m.Workflow.Jobs {
			for _, t := range j.RunsOn {
				if t.IsLiteral() {
					labels = append(labels, t.Source())
					continue
				}
				for _, v := range j.Variants {
					matrix := map[string]any{}
					for _, kv := range v.Values {
						matrix[kv.Key] = kv.Value
					}
					if s, err := renderWith(t.Source(), map[string]any{"matrix": matrix}); err == nil && kiln.ValidateLabels([]string{s}) == nil {
						labels = append(labels, s)
					}
				}
			}
		}
	}
	return kiln.NewLabels(labels...)
}

// execute starts the in-process server and agent, creates the runs and
// follows them to the end.
func execute(ctx context.Context, r repo, ev *kiln.Event, matches []engine.Match, o Options) (int, error) {
	dir, err := os.MkdirTemp("", "kiln-run-")
	if err != nil {
		return ExitFailed, err
	}
	defer os.RemoveAll(dir)
	cfg := server.DefaultConfig()
	cfg.Listen, cfg.DataDir, cfg.LocalAgents = "127.0.0.1:0", dir, 0
	cfg.Queue.UnroutableGrace = 5 * time.Second
	logOut := io.Discard
	if o.Verbose {
		logOut = o.Err
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ready := make(chan *server.Server, 1)
	sctx, stopServer := context.WithCancel(context.Background())
	serverDone := make(chan error, 1)
	go func() {
		serverDone <- server.Run(sctx, cfg, server.Options{
			Out: io.Discard, Logger: log, Ready: func(s *server.Server) { ready <- s },
			CloneCredentials: workingTree(r.root),
		})
	}()
	defer func() {
		stopServer()
		<-serverDone
	}()
	var s *server.Server
	select {
	case s = <-ready:
	case err := <-serverDone:
		return ExitFailed, fmt.Errorf("the local orchestrator did not start: %w", err)
	}
	_, token, err := s.DB.Auth().CreateAgentToken(ctx, store.AgentTokenSpec{Name: "kiln run", CreatedBy: "kiln run"})
	if err != nil {
		return ExitFailed, err
	}
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- agent.Run(actx, agent.Config{
			Server: s.URL, Token: token, ID: "kiln-run", Labels: agentLabels(matches, o.StrictLabels),
			StateDir: dir + "/agent", MaxJobs: max(2, runtime.NumCPU()), Logger: log.With("part", "agent"),
			Executor: executor.Config{BaseEnv: append(os.Environ(), o.Env...)},
		})
	}()
	defer func() {
		stopAgent()
		<-agentDone
	}()
	if err := waitForAgent(ctx, s, agentDone); err != nil {
		return ExitFailed, err
	}
	runs, err := s.Engine.Start(ctx, engine.StartRequest{Event: ev, Matches: matches}, nil)
	if err != nil {
		return ExitFailed, err
	}
	ids := make([]string, len(runs))
	for i, cr := range runs {
		ids[i] = cr.ID
	}
	f := newFollower(s, ids, o)
	final, interrupted := f.follow(ctx)
	if interrupted {
		fmt.Fprintln(o.Err, "kiln run: interrupted; cancelling")
		for _, id := range ids {
			for range 2 { // graceful, then forced
				if _, err := s.Engine.Cancel(context.Background(), id, "interrupted"); err != nil {
					break
				}
			}
		}
		final, _ = f.follow(context.Background())
	}
	if o.JSON {
		return jsonResult(o.Out, final)
	}
	return summary(o.Out, final, style{on: o.Colour}, o.Safe), nil
}

// waitForAgent waits until the local agent is connected, so the first job
// does not report "waiting for an agent" for the moment it takes to start.
func waitForAgent(ctx context.Context, s *server.Server, agentDone <-chan error) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	deadline := time.After(30 * time.Second)
	for len(s.Fleet.Agents()) == 0 {
		select {
		case err := <-agentDone:
			return fmt.Errorf("the local agent stopped: %w", err)
		case <-deadline:
			return fmt.Errorf("the local agent did not connect within 30s (kiln run -v shows its log)")
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// summary prints one line per job and returns the exit code.
func summary(w io.Writer, runs []store.Run, st style, safe func(string) string) int {
	if safe == nil {
		safe = func(s string) string { return s }
	}
	fmt.Fprintln(w)
	code := ExitOK
	var c tally
	fmt.Fprintf(w, "%-40s %-16s %9s  %s\n", "JOB", "STATUS", "TIME", "")
	for _, run := range runs {
		for _, j := range sortedJobs(run) {
			c.add(j.Status)
			status := fmt.Sprintf("%-16s", j.Status)
			fmt.Fprintf(w, "%-40s %s %9s  %s\n", safe(clip(run.Workflow+" / "+j.Name, 40)), st.status(status), elapsed(j.StartedAt, j.FinishedAt), safe(firstLine(j.Error)))
		}
		if run.Status != kiln.RunSuccess {
			code = ExitFailed
		}
	}
	line := "kiln run: " + c.sentence()
	if code == ExitOK {
		fmt.Fprintln(w, st.paint(sgrGreen, line))
	} else {
		fmt.Fprintln(w, st.paint(sgrRed, line))
	}
	return code
}

func sortedJobs(run store.Run) []store.Job {
	jobs := append([]store.Job(nil), run.Jobs...)
	sort.SliceStable(jobs, func(i, j int) bool { return jobs[i].Index < jobs[j].Index })
	return jobs
}

// tally counts jobs by what they came to, for the closing sentence.
type tally struct{ total, passed, failed, cancelled, skipped int }

func (c *tally) add(s kiln.JobStatus) {
	c.total++
	switch s.Result() {
	case kiln.ResultSuccess:
		c.passed++
	case kiln.ResultSkipped:
		c.skipped++
	case kiln.ResultCancelled:
		c.cancelled++
	default:
		c.failed++
	}
}

// sentence says it as a person would: "the job passed", "all 7 jobs
// passed", "5 of 7 jobs passed, 2 skipped", "1 of 7 jobs failed, 2 skipped".
func (c tally) sentence() string {
	jobs := plural(c.total, "job")
	var s string
	switch {
	case c.failed > 0:
		s = fmt.Sprintf("%d of %s failed", c.failed, jobs)
	case c.cancelled > 0:
		s = fmt.Sprintf("%d of %s cancelled", c.cancelled, jobs)
		c.cancelled = 0
	case c.total == 1 && c.passed == 1:
		return "the job passed"
	case c.passed == c.total:
		return fmt.Sprintf("all %d jobs passed", c.total)
	default:
		s = fmt.Sprintf("%d of %s passed", c.passed, jobs)
	}
	if c.failed > 0 && c.cancelled > 0 {
		s += fmt.Sprintf(", %d cancelled", c.cancelled)
	}
	if c.skipped > 0 {
		s += fmt.Sprintf(", %d skipped", c.skipped)
	}
	return s
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func elapsed(from, to time.Time) string {
	if from.IsZero() || to.IsZero() {
		return "-"
	}
	return to.Sub(from).Round(100 * time.Millisecond).String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// workingTree checks every job out from the working tree at its path as it
// is, uncommitted changes included: kiln run's fleet.CloneCredentials.
type workingTree string

// Checkout points the agent at the working tree.
func (w workingTree) Checkout(context.Context, jobspec.Checkout) (*proto.Checkout, error) {
	return &proto.Checkout{LocalPath: string(w)}, nil
}
