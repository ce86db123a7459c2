package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/waittest"
)

const multiStepWorkflow = `name: build
on:
  push:
    branches: [main]
jobs:
  build:
    runs_on: [linux]
    steps:
      - name: count
        run: for i in $(seq 1 200); do echo "line $i"; done
      - name: warn
        run: echo oops >&2; exit 3
        continue_on_error: true
      - name: env
        run: |
          test -f README
          echo "GREETING=hello" >> "$KILN_ENV"
          echo "version=1.2.3" >> "$KILN_OUTPUT"
      - name: use
        run: echo "greeting=$GREETING"
  deploy:
    needs: [build]
    runs_on: [linux]
    steps:
      - name: ship
        run: echo "deploying ${{ needs.build.outputs.version }}"
`

// A push to a local source runs a multi-step workflow on a real agent
// process: the checkout, every step's log by stream, a failing step
// continued past, env carried between steps, and outputs passed to the
// dependent job.
// Proves B56 (docs/behaviours.md).
func TestMultiStepJobRunsOnARealAgentProcess(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	localRun(t, s, map[string]string{"build": multiStepWorkflow})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{Name: "box"})
	startAgent(t, s.URL, secret, agentOpts{id: "box-1"})

	run := triggerOne(t, s.Client, "app")
	run = waitRun(t, s.Client, run.ID, time.Minute)
	if run.Status != kiln.RunSuccess {
		t.Fatalf("%s", describeRun(run))
	}
	build := mustJob(t, run, "build")
	if build.AgentID != "box-1" || build.Attempt != 1 || build.Outputs["version"] != "1.2.3" {
		t.Fatalf("build: agent %q attempt %d outputs %v", build.AgentID, build.Attempt, build.Outputs)
	}
	var got []string
	for _, st := range build.Steps {
		exit := -1
		if st.ExitCode != nil {
			exit = *st.ExitCode
		}
		got = append(got, fmt.Sprintf("%s:%s:%d", st.Name, st.Status, exit))
	}
	want := []string{"count:success:0", "warn:failed:3", "env:success:0", "use:success:0"}
	if !slices.Equal(got, want) {
		t.Fatalf("build steps %v, want %v", got, want)
	}

	count := texts(logLines(t, s.Client, run.ID, "build", intp(0)))
	if len(count) != 200 || count[0] != "line 1" || count[199] != "line 200" {
		t.Fatalf("count step logged %d lines: %q…", len(count), count[:min(len(count), 3)])
	}
	warn := logLines(t, s.Client, run.ID, "build", intp(1))
	if len(warn) != 1 || warn[0].Text != "oops" || warn[0].Stream != "stderr" {
		t.Fatalf("warn step log %+v", warn)
	}
	if use := texts(logLines(t, s.Client, run.ID, "build", intp(3))); !slices.Equal(use, []string{"greeting=hello"}) {
		t.Fatalf("use step log %q", use)
	}
	if checkout := logLines(t, s.Client, run.ID, "build", intp(-1)); len(checkout) == 0 {
		t.Fatal("the checkout logged nothing")
	}
	ship := texts(logLines(t, s.Client, run.ID, "deploy", intp(0)))
	if !slices.Equal(ship, []string{"deploying 1.2.3"}) {
		t.Fatalf("deploy log %q", ship)
	}
	if d := mustJob(t, run, "deploy"); d.Status != kiln.JobSuccess || !strings.HasPrefix(d.AgentID, "box-1") {
		t.Fatalf("deploy %+v", d)
	}
}

// tickStep is a step that records its shell's pid and a background child's
// pid in pids, then appends "<id> <n>" to marks n times (id names the
// shell process): the marks show which attempt ran when, the pid files
// whether its processes are gone.
func tickStep(pids, marks string, n int, pause string) string {
	return fmt.Sprintf(`id=%[5]s
          echo %[6]s > %[1]s/shell-$id.pid
          sleep 600 &
          echo %[7]s > %[1]s/child-$id.pid
          for i in $(seq 1 %[3]d); do echo "$id $i" >> %[2]s; echo "tick $i"; sleep %[4]s; done`, pids, marks, n, pause, selfID, selfPid, childPid)
}

// markRuns reads a marks file and returns the pids of its runs of
// consecutive lines: one entry per attempt when attempts never overlap.
func markRuns(t testing.TB, marks string) []string {
	t.Helper()
	b, err := os.ReadFile(marks)
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		pid, _, _ := strings.Cut(line, " ")
		if len(runs) == 0 || runs[len(runs)-1] != pid {
			runs = append(runs, pid)
		}
	}
	return runs
}

func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

// kill -9 of an agent mid-step: its step processes (the shell and a
// background child) die with it; both jobs it ran enter recovery at once
// and are never sent to the other, live agent inside the recovery window;
// when the window ends the on_agent_lost: retry job is requeued and runs
// to success on the other agent (its two attempts never overlap), while
// the on_agent_lost: fail job fails agent_lost and the job waiting on it
// is released (skipped), so the run finishes. The killed agent's job
// directories are removed when it starts again (B270).
//
// B48 (the socket-close path): what waits on the lost
// agent's failed job is released.
func TestAgentKilledMidStepStepsDieAndJobsFollowOnAgentLost(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dir := t.TempDir()
	pids, marksRetry, marksFail := filepath.Join(dir, "pids"), filepath.Join(dir, "retry.marks"), filepath.Join(dir, "fail.marks")
	if err := os.Mkdir(pids, 0o755); err != nil {
		t.Fatal(err)
	}
	killLeftovers(t, pids)
	localRun(t, s, map[string]string{"lost": `on: push
jobs:
  retried:
    runs_on: [doomed]
    on_agent_lost: retry
    steps:
      - run: |
          ` + tickStep(pids, marksRetry, 40, "0.05") + `
  failed:
    runs_on: [doomed]
    on_agent_lost: fail
    steps:
      - run: |
          ` + tickStep(pids, marksFail, 400, "0.05") + `
  after:
    needs: [failed]
    steps:
      - run: echo never
`})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	doomedState := scratchDir(t)
	doomed := startAgent(t, s.URL, secret, agentOpts{id: "doomed", labels: "doomed", maxJobs: 2, stateDir: doomedState})
	run := triggerOne(t, s.Client, "app")
	waittest.UntilState(t, time.Minute, "both jobs to tick", func() (bool, string) {
		return countLines(marksRetry) >= 3 && countLines(marksFail) >= 3, fmt.Sprint(readPids(t, pids))
	})
	before := readPids(t, pids)
	if len(before) != 4 {
		t.Fatalf("pid files %v, want a shell and a child per job", before)
	}
	doomed.signal(t, syscall.SIGKILL)
	doomed.wait(t, 10*time.Second)
	lostAt := time.Now()

	waittest.UntilState(t, 10*time.Second, "the killed agent's step processes to be gone", func() (bool, string) {
		var left []string
		for name, pid := range before {
			if alive(pid) {
				left = append(left, name)
			}
		}
		return len(left) == 0, fmt.Sprint("still running: ", left)
	})
	for _, name := range []string{"retried", "failed"} {
		waitJob(t, s.Client, run.ID, name, 5*time.Second, "recovering at once", jobIs(kiln.JobRecovering))
	}
	// B270: the killed agent's two job directories are left; the agent
	// started again on its state directory removes them (under another id
	// and label, so it neither takes a job nor waits for the old id).
	jobDirs := func() []string {
		dirs, _ := filepath.Glob(filepath.Join(doomedState, "work", "job-*"))
		return dirs
	}
	if left := jobDirs(); len(left) != 4 { // two directories, two lock files
		t.Fatalf("the killed agent left %v, want two job directories and their lock files", left)
	}
	startAgent(t, s.URL, secret, agentOpts{id: "doomed-again", labels: "elsewhere", stateDir: doomedState})
	waittest.UntilState(t, 20*time.Second, "the restarted agent to remove the job directories", func() (bool, string) {
		left := jobDirs()
		return len(left) == 0, fmt.Sprint(left)
	})
	// Another agent that could take both jobs connects at once; inside the
	// recovery window neither job goes to it.
	startAgent(t, s.URL, secret, agentOpts{id: "survivor", labels: "doomed", maxJobs: 2})
	waittest.UntilState(t, 10*time.Second, "the survivor to connect", func() (bool, string) {
		return agentState(t, s.Client, "survivor") == api.AgentConnected, agentState(t, s.Client, "survivor")
	})
	for time.Since(lostAt) < s.Config.Agents.RecoveryWindow*2/3 {
		r := getRun(t, s.Client, run.ID)
		for _, j := range r.Jobs {
			if j.AgentID == "survivor" {
				t.Fatalf("a job moved to the survivor inside the recovery window: %s", describeRun(r))
			}
		}
		time.Sleep(poll)
	}

	run = waitRun(t, s.Client, run.ID, time.Minute)
	retried, failed, after := mustJob(t, run, "retried"), mustJob(t, run, "failed"), mustJob(t, run, "after")
	if retried.Status != kiln.JobSuccess || retried.AgentID != "survivor" || retried.Attempt != 2 {
		t.Fatalf("retried: %s", describeRun(run))
	}
	if failed.Status != kiln.JobAgentLost || !strings.Contains(failed.Error, "on_agent_lost: fail") {
		t.Fatalf("failed: %s", describeRun(run))
	}
	if after.Status != kiln.JobSkipped || run.Status != kiln.RunFailed {
		t.Fatalf("the job waiting on the lost one was not released: %s", describeRun(run))
	}
	if runs := markRuns(t, marksRetry); len(runs) != 2 {
		t.Fatalf("the retried job's attempts overlap or one is missing: runs of pids %v", runs)
	}
	if runs := markRuns(t, marksFail); len(runs) != 1 {
		t.Fatalf("the on_agent_lost: fail job ran again: runs of pids %v", runs)
	}
	if lines := texts(logLines(t, s.Client, run.ID, "retried", intp(0))); len(lines) != 40 || lines[39] != "tick 40" {
		t.Fatalf("the retried attempt's log has %d lines", len(lines))
	}
}

// agentState is the agent's state as the API lists it ("" if unknown).
func agentState(t testing.TB, c *api.Client, id string) string {
	t.Helper()
	a, ok := agentByID(t, c, id)
	if !ok {
		return ""
	}
	return a.State
}

func agentByID(t testing.TB, c *api.Client, id string) (api.Agent, bool) {
	t.Helper()
	agents, err := c.Agents(bg)
	if err != nil {
		t.Fatalf("list agents: %v", err)
	}
	for _, a := range agents {
		if a.ID == id {
			return a, true
		}
	}
	return api.Agent{}, false
}

// waitConnected waits until the agent is listed connected and returns it.
func waitConnected(t testing.TB, c *api.Client, id string) api.Agent {
	t.Helper()
	var a api.Agent
	waittest.UntilState(t, 30*time.Second, "agent "+id+" to be connected", func() (bool, string) {
		var ok bool
		a, ok = agentByID(t, c, id)
		return ok && a.Connected, fmt.Sprintf("%+v", a)
	})
	return a
}

// waitLog waits until a process has written want.
func waitLog(t testing.TB, p *proc, want string) {
	t.Helper()
	waittest.UntilState(t, 30*time.Second, p.name+" to log "+want, func() (bool, string) {
		return strings.Contains(p.log.String(), want), tail(p.log.String(), 5)
	})
}

// Two agents claiming one id with different tokens: the second gets
// AGENT_ID_IN_USE and a retryable close (4003), and the first keeps its
// registration and its running job untouched. The same token reconnecting
// replaces the older connection (which stops: close 4009), and once the id
// is free the agent may come back with a new token. A process holding the
// holder's own token but not its state directory's secret is refused for
// good (close 4010) and the holder is untouched.
//
// B44 (AGENT_ID_IN_USE), B45 (same-token
// reconnects and a new token after the old connection closed are
// accepted) and B113 (the id is bound to the agent's secret).
func TestAgentIDClaimedWithAnotherTokenIsRefusedAndTheHolderIsUntouched(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	gate := filepath.Join(t.TempDir(), "gate")
	localRun(t, s, map[string]string{"held": fmt.Sprintf(`on: push
jobs:
  held:
    runs_on: [twin]
    steps:
      - run: while [ ! -f %s ]; do sleep 0.02; done; echo released
`, gate)})
	secretA, tokenA := agentToken(t, s.Client, api.CreateTokenRequest{Name: "a"})
	secretB, tokenB := agentToken(t, s.Client, api.CreateTokenRequest{Name: "b"})
	holderState := scratchDir(t)
	holder := startAgent(t, s.URL, secretA, agentOpts{id: "twin", labels: "twin", stateDir: holderState})
	before := waitConnected(t, s.Client, "twin")
	run := triggerOne(t, s.Client, "app")
	waitJob(t, s.Client, run.ID, "held", 30*time.Second, "running on twin", jobIs(kiln.JobRunning))

	impostor := startAgent(t, s.URL, secretB, agentOpts{id: "twin", labels: "twin"})
	waitLog(t, impostor, "close 4003: agent id twin is in use by a connection authenticated with another token")
	after, _ := agentByID(t, s.Client, "twin")
	if !after.Connected || after.TokenID != tokenA || !after.ConnectedAt.Equal(*before.ConnectedAt) || after.ActiveJobs != 1 {
		t.Fatalf("the holder's registration changed: before %+v, after %+v (token a is %s)", before, after, tokenA)
	}
	if impostor.exited() {
		t.Fatal("AGENT_ID_IN_USE is retryable, but the refused agent stopped")
	}
	impostor.kill()
	// B113: a process with the holder's own token but not its state
	// directory (so not its secret) cannot supersede it, and stops.
	thief := startAgent(t, s.URL, secretA, agentOpts{id: "twin", labels: "twin"})
	if code := thief.wait(t, 30*time.Second); code == 0 {
		t.Fatal("the agent without the id's secret exited 0")
	}
	waitLog(t, thief, "the orchestrator refused the agent id (close 4010: agent id twin belongs to another agent")
	if after, _ := agentByID(t, s.Client, "twin"); !after.Connected || !after.ConnectedAt.Equal(*before.ConnectedAt) || after.ActiveJobs != 1 {
		t.Fatalf("the holder's registration changed: before %+v, after %+v", before, after)
	}
	if holder.exited() {
		t.Fatal("the holder was superseded by an agent without its secret")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run = waitRun(t, s.Client, run.ID, time.Minute)
	if j := mustJob(t, run, "held"); j.Status != kiln.JobSuccess || j.Attempt != 1 || j.Dispatches != 1 || j.AgentID != "twin" {
		t.Fatalf("the holder's job was disturbed: %s", describeRun(run))
	}

	// The same agent (token and state directory) reconnecting replaces
	// the old connection, which stops for good (exit 0).
	successor := startAgent(t, s.URL, secretA, agentOpts{id: "twin", labels: "twin", stateDir: holderState})
	if code := holder.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the superseded agent exited %d", code)
	}
	waitLog(t, holder, "a newer connection of this agent took over")
	waitConnected(t, s.Client, "twin")
	successor.signal(t, syscall.SIGTERM) // drains and exits
	if code := successor.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the drained agent exited %d", code)
	}
	// Once the id is free, the agent may come back with another token.
	startAgent(t, s.URL, secretB, agentOpts{id: "twin", labels: "twin", stateDir: holderState})
	waittest.UntilState(t, 30*time.Second, "twin to be connected with token b", func() (bool, string) {
		a, _ := agentByID(t, s.Client, "twin")
		return a.Connected && a.TokenID == tokenB, fmt.Sprintf("%+v", a)
	})
}

// An agent that falls silent (SIGSTOP) while it runs a job: the heartbeat
// monitor first reports it unhealthy (the job still runs), then drops it —
// its job enters recovery before the agent leaves the list, never after —
// and closes its socket with 4004. Resumed (SIGCONT) inside the recovery
// window, the agent reconnects, keeps its job and finishes it: one
// dispatch, one attempt, every log line once.
//
// B47 (the heartbeat monitor's ordering).
func TestSilentAgentIsMarkedUnhealthyThenDroppedAndRecoversItsJob(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) {
		c.Agents.UnhealthyAfter, c.Agents.DropAfter, c.Agents.RecoveryWindow = time.Second, 4*time.Second, 20*time.Second
	})
	const n = 60
	localRun(t, s, map[string]string{"slow": fmt.Sprintf(`on: push
jobs:
  slow:
    steps:
      - run: for i in $(seq 1 %d); do echo $i; sleep 0.1; done
`, n)})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	agent := startAgent(t, s.URL, secret, agentOpts{id: "sleepy"})
	run := triggerOne(t, s.Client, "app")
	waitJob(t, s.Client, run.ID, "slow", 30*time.Second, "running", jobIs(kiln.JobRunning))
	agent.signal(t, syscall.SIGSTOP)

	sawUnhealthy := false
	waittest.UntilState(t, 30*time.Second, "the silent agent to be dropped", func() (bool, string) {
		// The job is read before the agent: if the agent is still only
		// unhealthy afterwards, it was when the job was read — and its
		// job is running, or already handed to recovery in the moment
		// before the agent leaves the list (B47's order), nothing else.
		j := mustJob(t, getRun(t, s.Client, run.ID), "slow")
		a, _ := agentByID(t, s.Client, "sleepy")
		switch a.State {
		case api.AgentUnhealthy:
			if j.Status != kiln.JobRunning && j.Status != kiln.JobRecovering {
				t.Fatalf("the job of an agent that is only unhealthy is %s: neither running nor handed to recovery", j.Status)
			}
			sawUnhealthy = true
		case api.AgentDisconnected:
			// The job was handed to recovery before the agent left.
			j = mustJob(t, getRun(t, s.Client, run.ID), "slow")
			if j.Status != kiln.JobRecovering {
				t.Fatalf("the agent is gone but its job is %s", j.Status)
			}
			return true, ""
		}
		return false, fmt.Sprintf("agent %s, job %s", a.State, j.Status)
	})
	if !sawUnhealthy {
		t.Fatal("the agent was dropped without being reported unhealthy first")
	}
	if !strings.Contains(s.log.String(), "cause=heartbeat_timeout") {
		t.Fatal("the server log does not say the agent was dropped for its heartbeat")
	}
	agent.signal(t, syscall.SIGCONT)
	waitLog(t, agent, "close 4004")
	run = waitRun(t, s.Client, run.ID, time.Minute)
	j := mustJob(t, run, "slow")
	if run.Status != kiln.RunSuccess || j.Attempt != 1 || j.Dispatches != 1 || j.AgentID != "sleepy" {
		t.Fatalf("the job was not recovered: %s (dispatches %d)", describeRun(run), j.Dispatches)
	}
	lines := texts(logLines(t, s.Client, run.ID, "slow", intp(0)))
	if len(lines) != n || lines[0] != "1" || lines[n-1] != fmt.Sprint(n) {
		t.Fatalf("the log holds %d lines: %q…", len(lines), lines[:min(5, len(lines))])
	}
}

// With local_agents the server starts its own agent processes (the kiln
// binary, labelled local plus OS and architecture), so a newcomer's server
// runs jobs with nothing else installed; they stop with the server.
// Proves B69 (docs/behaviours.md).
func TestServerRunsJobsOnItsLocalAgents(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.LocalAgents = 1 })
	localRun(t, s, map[string]string{"ci": `on: push
jobs:
  here:
    runs_on: [local, linux]
    steps:
      - run: echo "on $(hostname)"
`})
	run := waitRun(t, s.Client, triggerOne(t, s.Client, "app").ID, time.Minute)
	if j := mustJob(t, run, "here"); run.Status != kiln.RunSuccess || j.AgentID != "local-1" {
		t.Fatalf("%s", describeRun(run))
	}
	if !localAgentRunning(s.Config.DataDir) {
		t.Fatal("no local agent process found")
	}
	s.stop()
	waittest.UntilState(t, 30*time.Second, "the local agent process to stop with the server", func() (bool, string) {
		return !localAgentRunning(s.Config.DataDir), ""
	})
}

// localAgentRunning reports whether a kiln agent process of the server
// with dataDir runs (its state is beside the data directory, its token
// file in it).
func localAgentRunning(dataDir string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := string(b)
		if strings.Contains(cmd, "agent\x00") && strings.Contains(cmd, "\x00"+dataDir) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			if alive(pid) {
				return true
			}
		}
	}
	return false
}
