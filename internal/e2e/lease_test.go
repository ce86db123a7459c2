package e2e

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// stampStep records its shell's pid in pids and appends "<id> <unix ms>"
// to marks n times, 0.1 s apart: which copy of the job ran when.
func stampStep(pids, marks string, n int) string {
	return fmt.Sprintf(`id=%[4]s
          echo %[5]s > %[1]s/shell-$id.pid
          for i in $(seq 1 %[3]d); do echo "$id $(date +%%s%%3N)" >> %[2]s; echo "tick $i"; sleep 0.1; done`, pids, marks, n, selfID, selfPid)
}

// leaseWorkflow is one on_agent_lost: retry job that runs on the pool.
func leaseWorkflow(pids, marks string) string {
	return `on: push
jobs:
  long:
    runs_on: [pool]
    on_agent_lost: retry
    steps:
      - run: |
          ` + stampStep(pids, marks, 200) + `
`
}

// copies reads a marks file into each copy's first and last time.
type copySpan struct{ first, last int64 }

func copies(t testing.TB, marks string) (order []string, spans map[string]copySpan) {
	t.Helper()
	b, err := os.ReadFile(marks)
	if err != nil {
		t.Fatal(err)
	}
	spans = map[string]copySpan{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		id, ts, ok := strings.Cut(line, " ")
		ms, err := strconv.ParseInt(ts, 10, 64)
		if !ok || err != nil {
			continue // a line cut by the kill
		}
		s, seen := spans[id]
		if !seen {
			order = append(order, id)
			s.first = ms
		}
		s.last = ms
		spans[id] = s
	}
	return order, spans
}

// noOverlap checks the invariant: the job's copies ran one after the
// other, never at once, and returns the gap between them.
func noOverlap(t testing.TB, marks string, want int) time.Duration {
	t.Helper()
	order, spans := copies(t, marks)
	if len(order) != want {
		t.Fatalf("the job ran %d times, want %d (%v)", len(order), want, spans)
	}
	var gap time.Duration
	for i := 1; i < len(order); i++ {
		prev, next := spans[order[i-1]], spans[order[i]]
		if next.first <= prev.last {
			t.Fatalf("two copies of the job ran at once: %s until %d, %s from %d", order[i-1], prev.last, order[i], next.first)
		}
		gap = time.Duration(next.first-prev.last) * time.Millisecond
	}
	return gap
}

// shellGone waits for the first copy's shell to be gone and returns when
// it was seen gone.
func shellGone(t testing.TB, pids string, d time.Duration) {
	t.Helper()
	var before map[string]int
	waittest.UntilState(t, 30*time.Second, "the step's shell to have started", func() (bool, string) {
		before = readPids(t, pids)
		return len(before) == 1, fmt.Sprint(before)
	})
	waittest.UntilState(t, d, "the stopped agent's step to be killed", func() (bool, string) {
		for _, pid := range before {
			if alive(pid) {
				return false, fmt.Sprint(before)
			}
		}
		return true, ""
	})
}

// An agent frozen by SIGSTOP while it runs a job cannot act, yet its
// step's supervisor stops the step once the agent's lease (drop_after +
// recovery_window − margin after the last answered heartbeat) runs out —
// before the orchestrator, which drops the silent agent after drop_after
// and waits the window, gives the job to another agent. The two copies of
// the job never run at once (markers with timestamps), the job succeeds on
// the other agent, and the frozen agent, resumed, reports nothing of its
// copy: the result stays the other agent's.
//
// B126.
func TestFrozenAgentsStepStopsBeforeItsJobRunsElsewhere(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, testFrozenAgent)
}

func testFrozenAgent(t *testing.T, s *kilnServer) {
	dir := t.TempDir()
	pids, marks := filepath.Join(dir, "pids"), filepath.Join(dir, "marks")
	if err := os.Mkdir(pids, 0o755); err != nil {
		t.Fatal(err)
	}
	killLeftovers(t, pids)
	localRun(t, s, map[string]string{"long": leaseWorkflow(pids, marks)})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	frozen := startAgent(t, s.URL, secret, agentOpts{id: "frozen", labels: "pool"})
	run := triggerOne(t, s.Client, "app")
	waittest.UntilState(t, time.Minute, "the job to tick on the first agent", func() (bool, string) {
		return countLines(marks) >= 3, fmt.Sprint(countLines(marks))
	})
	startAgent(t, s.URL, secret, agentOpts{id: "spare", labels: "pool"})
	waitConnected(t, s.Client, "spare")
	frozen.signal(t, syscall.SIGSTOP)
	stoppedAt := time.Now()

	// Still frozen: only the supervisor can have killed the step.
	shellGone(t, pids, time.Minute)
	t.Logf("the frozen agent's step was killed %s after SIGSTOP", time.Since(stoppedAt).Round(time.Millisecond))

	run = waitRun(t, s.Client, run.ID, 2*time.Minute)
	j := mustJob(t, run, "long")
	if run.Status != kiln.RunSuccess || j.AgentID != "spare" || j.Attempt != 2 {
		t.Fatalf("the job did not move to the spare agent: %s", describeRun(run))
	}
	gap := noOverlap(t, marks, 2)
	t.Logf("the second copy started %s after the first stopped", gap)

	frozen.signal(t, syscall.SIGCONT)
	waitLog(t, frozen, "lease ran out")
	waitConnected(t, s.Client, "frozen")
	run = getRun(t, s.Client, run.ID)
	if j := mustJob(t, run, "long"); j.Status != kiln.JobSuccess || j.AgentID != "spare" || j.Attempt != 2 {
		t.Fatalf("the resumed agent changed the job: %s", describeRun(run))
	}
	noOverlap(t, marks, 2)
}

// onEachDatabase runs test against an in-process server on SQLite and on
// PostgreSQL (B126 holds on both: the agent's lease does not depend on the
// database).
func onEachDatabase(t *testing.T, test func(*testing.T, *kilnServer)) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			var opts []func(*server.Config)
			if b.Name != "sqlite" {
				url := b.URL(t)
				opts = append(opts, func(c *server.Config) { c.Database = url })
			}
			test(t, startServer(t, opts...))
		})
	}
}

// dropProxy forwards TCP connections to a target until it is cut: then it
// silently swallows every byte both ways and answers nothing, as a dead
// network path does (no reset, no close).
type dropProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startDropProxy(t testing.TB, target string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.track(c)
			wg.Go(func() { p.serve(c, &wg) })
		}
	})
	return p
}

func (p *dropProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *dropProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *dropProxy) serve(c net.Conn, wg *sync.WaitGroup) {
	if p.cut.Load() {
		_, _ = io.Copy(io.Discard, c)
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.track(up)
	wg.Go(func() { p.pipe(c, up) })
	p.pipe(up, c)
}

// pipe copies from src to dst while the proxy is not cut, and swallows
// what src sends once it is.
func (p *dropProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// An agent whose traffic is silently dropped (a proxy that swallows every
// byte both ways, with no reset): its pings go unanswered, so it gives the
// connection up, and once its lease runs out it stops its job's step — with
// the orchestrator still counting drop_after and the recovery window. The
// job then runs once more on another agent, never at the same time as the
// first copy, and when the path heals the first agent reconnects without
// claiming the job: the result is the second copy's.
//
// B126.
func TestCutOffAgentStopsItsJobBeforeItRunsElsewhere(t *testing.T) {
	t.Parallel()
	onEachDatabase(t, testCutOffAgent)
}

func testCutOffAgent(t *testing.T, s *kilnServer) {
	dir := t.TempDir()
	pids, marks := filepath.Join(dir, "pids"), filepath.Join(dir, "marks")
	if err := os.Mkdir(pids, 0o755); err != nil {
		t.Fatal(err)
	}
	killLeftovers(t, pids)
	localRun(t, s, map[string]string{"long": leaseWorkflow(pids, marks)})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	proxy := startDropProxy(t, strings.TrimPrefix(s.URL, "http://"))
	cutOff := startAgent(t, proxy.URL(), secret, agentOpts{id: "cut-off", labels: "pool"})
	run := triggerOne(t, s.Client, "app")
	waittest.UntilState(t, time.Minute, "the job to tick on the first agent", func() (bool, string) {
		return countLines(marks) >= 3, fmt.Sprint(countLines(marks))
	})
	startAgent(t, s.URL, secret, agentOpts{id: "spare", labels: "pool"})
	waitConnected(t, s.Client, "spare")
	proxy.cut.Store(true)
	cutAt := time.Now()

	shellGone(t, pids, time.Minute)
	t.Logf("the cut-off agent's step was killed %s after the cut", time.Since(cutAt).Round(time.Millisecond))
	waitLog(t, cutOff, "stopping its jobs")

	run = waitRun(t, s.Client, run.ID, 2*time.Minute)
	j := mustJob(t, run, "long")
	if run.Status != kiln.RunSuccess || j.AgentID != "spare" || j.Attempt != 2 {
		t.Fatalf("the job did not move to the spare agent: %s", describeRun(run))
	}
	gap := noOverlap(t, marks, 2)
	t.Logf("the second copy started %s after the first stopped", gap)

	proxy.cut.Store(false)
	waittest.UntilState(t, time.Minute, "the cut-off agent to reconnect", func() (bool, string) {
		a, _ := agentByID(t, s.Client, "cut-off")
		return a.Connected && a.State == api.AgentConnected, fmt.Sprintf("%+v", a)
	})
	run = getRun(t, s.Client, run.ID)
	if j := mustJob(t, run, "long"); j.Status != kiln.JobSuccess || j.AgentID != "spare" || j.Attempt != 2 {
		t.Fatalf("the reconnected agent changed the job: %s", describeRun(run))
	}
}
