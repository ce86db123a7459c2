package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/waittest"
)

// agentHelperEnv makes the test binary act as a stand-in agent: it runs
// the job in the named JSON file and blocks until killed.
const agentHelperEnv = "KILN_EXECUTOR_TEST_AGENT_JOB"

// isolateHelperEnv makes the stand-in agent isolate its steps.
const isolateHelperEnv = "KILN_EXECUTOR_TEST_ISOLATE"

func TestMain(m *testing.M) {
	MaybeRunShim()
	if path := os.Getenv(agentHelperEnv); path != "" {
		runAgentHelper(path)
		return
	}
	goleak.VerifyTestMain(m)
}

func runAgentHelper(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var job Job
	if err := json.Unmarshal(b, &job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg := Config{WorkRoot: filepath.Dir(path)}
	if os.Getenv(isolateHelperEnv) != "" {
		cfg.Isolation = Isolation{Mode: IsolationRequired}
	}
	x, err := New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	x.Start(context.Background(), &job, nil).Wait()
	select {} // the test kills us
}

// testEnv is a small, predictable environment for steps. The shim is
// this test binary: under the race detector it would sleep a second at
// exit unless told not to.
func testEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LANG=C", raceEnv}
}

const raceEnv = "GORACE=atexit_sleep_ms=0"

// newExecutor returns an executor with short grace and batch times.
func newExecutor(t testing.TB, mod ...func(*Config)) *Executor {
	t.Helper()
	cfg := Config{
		WorkRoot:      t.TempDir(),
		GracePeriod:   500 * time.Millisecond,
		BatchInterval: 20 * time.Millisecond,
		BaseEnv:       testEnv(),
	}
	for _, f := range mod {
		f(&cfg)
	}
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// recorder is a Sink that keeps everything.
type recorder struct {
	mu      sync.Mutex
	events  []StepEvent
	batches []LogBatch
}

func (r *recorder) Step(ev StepEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) Log(b LogBatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, b)
}

// lines returns the log lines of one step in order.
func (r *recorder) lines(step int) []LogLine {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []LogLine
	for _, b := range r.batches {
		if b.StepIndex == step {
			out = append(out, b.Lines...)
		}
	}
	return out
}

// text is one step's log lines joined by newlines.
func (r *recorder) text(step int) string {
	var b strings.Builder
	for _, l := range r.lines(step) {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// allText is every log line of every step.
func (r *recorder) allText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, batch := range r.batches {
		for _, l := range batch.Lines {
			b.WriteString(l.Text)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (r *recorder) stepEvents(step int) []StepEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []StepEvent
	for _, ev := range r.events {
		if ev.Index == step {
			out = append(out, ev)
		}
	}
	return out
}

// runJob runs a job to its end.
func runJob(t testing.TB, x *Executor, job *Job) (Result, *recorder) {
	t.Helper()
	rec := &recorder{}
	res := x.Start(context.Background(), job, rec).Wait()
	return res, rec
}

// stepStatuses lists each step's terminal status in order (checkout first).
func stepStatuses(res Result) []kiln.StepStatus {
	var out []kiln.StepStatus
	for _, s := range res.Steps {
		out = append(out, s.Status)
	}
	return out
}

func wantStatuses(t testing.TB, res Result, want ...kiln.StepStatus) {
	t.Helper()
	got := stepStatuses(res)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("step statuses = %v, want %v (result %+v)", got, want, res)
	}
}

// readPids reads the pids a step wrote, one per line.
func readPids(t testing.TB, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad pid %q in %s", f, path)
		}
		pids = append(pids, pid)
	}
	return pids
}

// alive reports whether pid is a running process whose command line holds
// marker (so a recycled pid does not count).
func alive(pid int, marker string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := strings.LastIndexByte(string(st), ')'); i > 0 && strings.HasPrefix(string(st[i+1:]), " Z") {
			return false // a zombie is dead; its parent has not reaped it yet
		}
	}
	return strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), marker)
}

// waitAllGone polls /proc until none of the pids is alive.
func waitAllGone(t testing.TB, pids []int, marker string) {
	t.Helper()
	waittest.Until(t, 10*time.Second, fmt.Sprintf("pids %v to be gone", pids), func() bool {
		for _, pid := range pids {
			if alive(pid, marker) {
				return false
			}
		}
		return true
	})
}

// git runs git for test setup.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=kiln", "GIT_AUTHOR_EMAIL=kiln@example.com",
		"GIT_COMMITTER_NAME=kiln", "GIT_COMMITTER_EMAIL=kiln@example.com",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
