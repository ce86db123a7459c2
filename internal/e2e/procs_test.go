package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/waittest"
)

// proc is a kiln process the test started. It is killed when the test
// ends; what it writes goes to a logFile.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *logFile
	done chan struct{}
	err  error // once done is closed
	// started is the process's start time (startTicks): its group is
	// killed at the end only while the group's number is still its own.
	started uint64
}

// baseEnv is the environment of every process the tests start: the PATH,
// a private HOME and TMPDIR (an agent's job directories go there), no
// kiln settings and no git configuration of the machine.
func baseEnv(t testing.TB) []string {
	home := scratchDir(t)
	return []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home, "LANG=C",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
	}
}

// scratchDir is a temporary directory for a process's files. Unlike
// t.TempDir it tolerates a step the killed agent left behind still
// writing into it for a moment: removal is retried, and only logged if it
// keeps failing.
func scratchDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kiln-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Logf("could not remove %s: %v", dir, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dir
}

// startProc starts the kiln binary with args.
func startProc(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: newLogFile(t, name), done: make(chan struct{})}
	p.cmd = exec.Command(kilnBin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p.started = startTicks(p.pid()) // before the Wait below can reap it
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	// Registered after the log file's cleanup, so this runs first and the
	// log is complete when it is checked.
	t.Cleanup(func() { p.kill() })
	return p
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig (if the process still runs).
func (p *proc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if p.exited() {
		return
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s to %s: %v", sig, p.name, err)
	}
}

// kill sends SIGKILL to the process and to its process group, and waits
// for it to be gone. The group holds what it started without a group of
// its own (an agent's git); steps run in groups of their own, under a
// supervisor that kills them when the agent dies. A process that ended
// long before may have had its number given to another process, perhaps
// the leader of another test's group (pid_max is 32,768 here): the group
// is then left alone.
func (p *proc) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	if now := startTicks(p.pid()); p.started == 0 || (now != 0 && now != p.started) {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
}

// wait waits up to d for the process to exit and returns its exit code.
func (p *proc) wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s did not exit within %s", p.name, d)
	}
	if p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// agentOpts are the flags of one `kiln agent`.
type agentOpts struct {
	id      string
	labels  string
	maxJobs int
	// stateDir keeps the agent's id; default a new temporary directory.
	stateDir string
}

// startAgent starts `kiln agent` against the server at url.
func startAgent(t testing.TB, url, token string, o agentOpts) *proc {
	t.Helper()
	if o.stateDir == "" {
		o.stateDir = scratchDir(t)
	}
	args := []string{"agent", "--server", url, "--state-dir", o.stateDir}
	if o.id != "" {
		args = append(args, "--id", o.id)
	}
	if o.labels != "" {
		args = append(args, "--labels", o.labels)
	}
	if o.maxJobs > 0 {
		args = append(args, "--max-jobs", strconv.Itoa(o.maxJobs))
	}
	// The token comes from the environment, as an operator's would
	// (a flag would show in ps).
	env := append(baseEnv(t), "KILN_AGENT_TOKEN="+token)
	name := "agent"
	if o.id != "" {
		name = "agent-" + o.id
	}
	return startProc(t, name, env, args...)
}

// serverProc is a `kiln server` process over a data directory and a port
// the test keeps across restarts.
type serverProc struct {
	*proc
	URL     string
	dataDir string
	port    int
	args    []string
	env     []string    // beyond baseEnv
	stdout  *lineWriter // of the latest start
	admin   string      // the admin token, once read
}

// startServerProc starts `kiln server` on 127.0.0.1:port (0: a free one)
// with dataDir, no local agents and the short timings of fastConfig, plus
// extra flags; it returns once /health answers.
func startServerProc(t testing.TB, dataDir string, port int, extra ...string) *serverProc {
	t.Helper()
	return startServerProcEnv(t, dataDir, port, nil, extra...)
}

// startServerProcEnv is startServerProc with more environment variables
// (NAME=value) for the server process.
func startServerProcEnv(t testing.TB, dataDir string, port int, env []string, extra ...string) *serverProc {
	t.Helper()
	if port == 0 {
		port = freePort(t)
	}
	c := fastConfig(dataDir)
	sets := map[string]string{
		"agents.heartbeat_interval": c.Agents.HeartbeatInterval.String(), "agents.unhealthy_after": c.Agents.UnhealthyAfter.String(),
		"agents.drop_after": c.Agents.DropAfter.String(), "agents.job_heartbeat_interval": c.Agents.JobHeartbeatInterval.String(),
		"agents.stale_after": c.Agents.StaleAfter.String(), "agents.ack_timeout": c.Agents.AckTimeout.String(),
		"agents.recovery_window": c.Agents.RecoveryWindow.String(), "agents.lease_margin": c.Agents.LeaseMargin.String(),
		"queue.sweep_interval":   c.Queue.SweepInterval.String(),
		"queue.redrive_interval": c.Queue.RedriveInterval.String(), "log.level": "debug",
	}
	args := []string{"server", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", dataDir, "--local-agents", "0"}
	for k, v := range sets {
		args = append(args, "--set", k+"="+v)
	}
	args = append(args, extra...)
	s := &serverProc{URL: fmt.Sprintf("http://127.0.0.1:%d", port), dataDir: dataDir, port: port, args: args, env: env}
	s.start(t)
	return s
}

func (s *serverProc) start(t testing.TB) {
	t.Helper()
	s.stdout = &lineWriter{}
	p := &proc{name: "server", log: newLogFile(t, "server"), done: make(chan struct{})}
	p.cmd = exec.Command(kilnBin, s.args...)
	p.cmd.Env = append(baseEnv(t), s.env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stdout, p.cmd.Stderr = multi{s.stdout, p.log}, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start kiln server: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	s.proc = p
	waittest.UntilState(t, 30*time.Second, "kiln server to answer /health", func() (bool, string) {
		if p.exited() {
			t.Fatalf("kiln server exited: %v\n%s", p.err, tail(p.log.String(), 30))
		}
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		c, _ := newAnonClient(s.URL)
		err := c.Health(ctx)
		return err == nil, fmt.Sprint(err)
	})
}

// restart starts the server again (after it was killed) on the same port
// and data directory.
func (s *serverProc) restart(t testing.TB) {
	t.Helper()
	if !s.exited() {
		t.Fatal("restart: the server is still running")
	}
	s.start(t)
}

// adminToken is the token the server printed on stdout at its first
// start.
func (s *serverProc) adminToken(t testing.TB) string {
	t.Helper()
	if s.admin != "" {
		return s.admin
	}
	if tok := printedToken(s.stdout.lines()); tok != "" {
		s.admin = tok
		return tok
	}
	t.Fatalf("kiln server printed no admin token; stdout:\n%s", strings.Join(s.stdout.lines(), "\n"))
	return ""
}

// printedToken is the admin token among a server's stdout lines.
func printedToken(lines []string) string {
	for _, l := range lines {
		if f := strings.TrimSpace(l); strings.HasPrefix(f, store.AdminTokenPrefix) {
			return f
		}
	}
	return ""
}

// freePort finds a port nothing listens on (the server binds it a moment
// later; a collision fails the start loudly, not silently).
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// lineWriter keeps what is written, by line.
type lineWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lineWriter) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Split(w.buf.String(), "\n")
}

type multi []interface{ Write([]byte) (int, error) }

func (m multi) Write(p []byte) (int, error) {
	for _, w := range m {
		if _, err := w.Write(p); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// alive reports whether a process runs (a zombie waiting to be reaped by
// an init that never reaps counts as gone).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}

// selfPid is shell text for a step's own process in a form readPids
// resolves: its pid, which steps see inside a PID namespace of their own,
// that namespace, and the process's start time (in clock ticks since boot).
// The start time matters: a namespace's inode number is reused once the
// namespace is gone, and pids inside fresh namespaces repeat, so without it
// one test's clean-up could resolve its finished step to another test's
// running one and kill it. childPid is the same for the last background job.
const (
	selfPid  = `$$:$(readlink /proc/$$/ns/pid):$(cut -d" " -f22 /proc/$$/stat)`
	childPid = `$!:$(readlink /proc/$!/ns/pid):$(cut -d" " -f22 /proc/$!/stat)`
)

// selfID is shell text for a name unique to the step's own process: its
// pid alone repeats from one PID namespace to the next, and so does a
// namespace's inode number once the namespace is gone, so a random part
// tells two attempts apart.
const selfID = `$$-$(tr -dc 0-9a-f </proc/sys/kernel/random/uuid)`

// readPids reads the pid files (one pid each, or selfPid's form) a step
// wrote into dir, as pids of this test's PID namespace; a process that is
// gone reads as -1.
func readPids(t testing.TB, dir string) map[string]int {
	t.Helper()
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.TrimSpace(string(b))
		num, rest, inNS := strings.Cut(text, ":")
		pid, err := strconv.Atoi(num)
		if err != nil {
			continue // being written
		}
		if inNS {
			i := strings.LastIndexByte(rest, ':')
			if i < 0 || !strings.HasSuffix(rest[:i], "]") {
				continue // being written
			}
			start, err := strconv.ParseUint(rest[i+1:], 10, 64)
			if err != nil {
				continue
			}
			pid = hostPid(pid, rest[:i], start)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
	}
	return out
}

// hostPid finds the process that is pid in the PID namespace ns (as
// readlink /proc/<pid>/ns/pid names it) and started at start (clock ticks
// since boot), or -1.
func hostPid(pid int, ns string, start uint64) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "pid")); err != nil || link != ns {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(rest)
				if len(f) > 0 && f[len(f)-1] == strconv.Itoa(pid) {
					n, _ := strconv.Atoi(e.Name())
					if startTicks(n) != start {
						return -1 // the namespace's inode was reused
					}
					return n
				}
			}
		}
	}
	return -1
}

// startTicks is field 22 of /proc/<pid>/stat, the process's start time in
// clock ticks since boot, or 0 when the process is gone.
func startTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	// Fields after comm start at state, which is field 3.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// killLeftovers SIGKILLs, when the test ends, any process whose pid a
// step wrote into dir: a test that fails must not leave steps running.
func killLeftovers(t testing.TB, dir string) {
	t.Cleanup(func() {
		for _, pid := range readPids(t, dir) {
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// newAnonClient is a client without a token (for /health).
func newAnonClient(url string) (*api.Client, error) { return api.NewClient(url, "") }
