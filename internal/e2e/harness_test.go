package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/waittest"
)

var bg = context.Background()

// fastConfig is the server configuration of these tests: everything the
// real defaults have, with the protocol's timings shortened so heartbeat
// drops, ack timeouts and recovery windows happen in seconds. The windows
// stay generous enough that a loaded 2-core machine under -race does not
// drop healthy agents.
func fastConfig(dataDir string) server.Config {
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dataDir
	cfg.PublicURL = "http://kiln.example.test"
	cfg.LocalAgents = 0
	cfg.Log.Level = "debug"
	a := &cfg.Agents
	a.HeartbeatInterval, a.UnhealthyAfter, a.DropAfter = 250*time.Millisecond, 3*time.Second, 6*time.Second
	a.JobHeartbeatInterval, a.StaleAfter = 250*time.Millisecond, 10*time.Second
	a.AckTimeout, a.RecoveryWindow, a.LeaseMargin = 3*time.Second, 3*time.Second, 500*time.Millisecond
	cfg.Queue.SweepInterval, cfg.Queue.RedriveInterval = 100*time.Millisecond, 500*time.Millisecond
	// Tests start their agents after the run they trigger; on a loaded
	// machine an agent process can take seconds to register, so only the
	// test of the unroutable verdict itself sets a short grace.
	cfg.Queue.UnroutableGrace = 30 * time.Second
	cfg.Runs.CancelGrace = 5 * time.Second
	return cfg
}

// kilnServer is the composition root running in this process.
type kilnServer struct {
	*server.Server
	Client *api.Client
	Config server.Config
	log    *logFile
	stop   func()
}

// startServer runs server.Run with fastConfig adjusted by opts until the
// test ends.
func startServer(t testing.TB, opts ...func(*server.Config)) *kilnServer {
	t.Helper()
	cfg := fastConfig(t.TempDir())
	for _, o := range opts {
		o(&cfg)
	}
	lf := newLogFile(t, "server")
	ctx, cancel := context.WithCancel(bg)
	ready := make(chan *server.Server, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, cfg, server.Options{
			Out:         lf,
			Logger:      slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug})),
			AgentBinary: kilnBin,
			Ready:       func(s *server.Server) { ready <- s },
		})
	}()
	var s *server.Server
	select {
	case s = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("the server did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the server did not start within 30s")
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("the server stopped with %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("the server did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	client, err := api.NewClient(s.URL, s.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	return &kilnServer{Server: s, Client: client, Config: cfg, log: lf, stop: stop}
}

// agentToken creates an agent token through the API and returns its
// secret and id.
func agentToken(t testing.TB, c *api.Client, req api.CreateTokenRequest) (secret, id string) {
	t.Helper()
	tk, err := c.CreateToken(bg, req)
	if err != nil {
		t.Fatalf("create agent token: %v", err)
	}
	return tk.Secret, tk.Token.ID
}

// getRun reads a run, failing the test on an error.
func getRun(t testing.TB, c *api.Client, ref string) api.Run {
	t.Helper()
	r, err := c.GetRun(bg, ref)
	if err != nil {
		t.Fatalf("get run %s: %v", ref, err)
	}
	return r
}

// waitRun waits until the run has finished and returns it.
func waitRun(t testing.TB, c *api.Client, ref string, d time.Duration) api.Run {
	t.Helper()
	var run api.Run
	waittest.UntilState(t, d, "run "+ref+" to finish", func() (bool, string) {
		r, err := c.GetRun(bg, ref)
		if err != nil {
			return false, err.Error()
		}
		run = r
		return r.Status.Terminal(), describeRun(r)
	})
	return run
}

// waitJob waits until the run's job named name satisfies cond.
func waitJob(t testing.TB, c *api.Client, runRef, name string, d time.Duration, what string, cond func(api.Job) bool) api.Job {
	t.Helper()
	var job api.Job
	waittest.UntilState(t, d, fmt.Sprintf("job %s of run %s: %s", name, runRef, what), func() (bool, string) {
		r, err := c.GetRun(bg, runRef)
		if err != nil {
			return false, err.Error()
		}
		j, ok := jobNamed(r, name)
		if !ok {
			return false, "no such job: " + describeRun(r)
		}
		job = j
		return cond(j), describeRun(r)
	})
	return job
}

// jobIs is a waitJob condition: the job's status is one of st.
func jobIs(st ...kiln.JobStatus) func(api.Job) bool {
	return func(j api.Job) bool {
		for _, s := range st {
			if j.Status == s {
				return true
			}
		}
		return false
	}
}

func jobNamed(r api.Run, name string) (api.Job, bool) {
	for _, j := range r.Jobs {
		if j.Name == name {
			return j, true
		}
	}
	return api.Job{}, false
}

// mustJob returns the run's job named name.
func mustJob(t testing.TB, r api.Run, name string) api.Job {
	t.Helper()
	j, ok := jobNamed(r, name)
	if !ok {
		t.Fatalf("run #%d has no job %q: %s", r.Number, name, describeRun(r))
	}
	return j
}

// describeRun is a run in one line, for failure messages.
func describeRun(r api.Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run #%d %s", r.Number, r.Status)
	if r.FailureReason != "" {
		fmt.Fprintf(&b, " (%s)", r.FailureReason)
	}
	for _, j := range r.Jobs {
		fmt.Fprintf(&b, "; %s=%s", j.Name, j.Status)
		if j.AgentID != "" {
			fmt.Fprintf(&b, "@%s/%d", j.AgentID, j.Attempt)
		}
		if j.Error != "" {
			fmt.Fprintf(&b, " [%s]", j.Error)
		}
		if j.PendingReason != "" {
			fmt.Fprintf(&b, " <%s>", j.PendingReason)
		}
	}
	return b.String()
}

// logLines reads a job's log (all its steps, latest attempt) as text.
func logLines(t testing.TB, c *api.Client, runRef, job string, step *int) []api.LogLine {
	t.Helper()
	var out []api.LogLine
	err := c.Logs(bg, runRef, api.LogQuery{Job: job, Step: step, Limit: 100000}, func(l api.LogLine) error {
		out = append(out, l)
		return nil
	})
	if err != nil {
		t.Fatalf("logs of %s in run %s: %v", job, runRef, err)
	}
	return out
}

func texts(lines []api.LogLine) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.Text
	}
	return out
}

func intp(n int) *int { return &n }

// logFile collects what a server or process writes; when the test fails
// its tail is printed, and a data race reported in it fails the test.
type logFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func newLogFile(t testing.TB, name string) *logFile {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	lf := &logFile{path: path, f: f}
	t.Cleanup(func() {
		lf.mu.Lock()
		f.Close()
		lf.mu.Unlock()
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race:\n%s", name, tail(string(b), 200))
		} else if t.Failed() {
			t.Logf("--- last lines of %s:\n%s", name, tail(string(b), 60))
		}
	})
	return lf
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

// String is what was written so far.
func (l *logFile) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, _ := os.ReadFile(l.path)
	return string(b)
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
