package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// clusterArgs are the flags of a server sharing a database with others:
// short cluster timings, and no redrive worth the name, so a job reaches
// another server's agent only through the wake-up. The recovery window is
// longer than the tests' usual: an agent whose server died has the window
// less the lease margin to reconnect to another before it stops its jobs
// (B126), and a loaded machine needs a few seconds for that.
func clusterArgs(dbURL string) []string {
	return []string{"--database", dbURL, "--set", "cluster.heartbeat_interval=250ms", "--set", "cluster.dead_after=3s",
		"--set", "queue.redrive_interval=1h", "--set", "agents.recovery_window=10s"}
}

// Two servers on one PostgreSQL database, two agents on each. A run
// triggered through server B reaches A's idle agents through the wake-up
// alone (the redrive is an hour away); both servers list all four agents,
// each with its server; an agent id held on A is refused to another token
// on B. Then A is SIGKILLed together with one of its agents, mid-step:
// the other agent of A fails over to B and keeps its job (one dispatch, one
// attempt); the dead agent's job enters the recovery window on the leader
// and then runs on another agent; the run succeeds; no attempt overlapped
// another (the steps' marks), every log line of the kept job is stored
// once.
//
// B142, B144, B145, B146, B147.
func TestTwoServersOneKilledWithItsAgentRunFinishesOnTheOther(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	if err := os.Mkdir(pids, 0o755); err != nil {
		t.Fatal(err)
	}
	killLeftovers(t, pids)
	marks := map[string]string{"left": filepath.Join(dir, "left.marks"), "right": filepath.Join(dir, "right.marks")}
	srvA := startServerProc(t, t.TempDir(), 0, clusterArgs(dbURL)...)
	ca := procClient(t, srvA)
	srvB := startServerProc(t, t.TempDir(), 0, clusterArgs(dbURL)...)
	cb, err := api.NewClient(srvB.URL, srvA.adminToken(t)) // one database, one set of tokens
	if err != nil {
		t.Fatal(err)
	}
	const ticks = 60
	r := newRepo(t, map[string]string{workflow("pair"): fmt.Sprintf(`on: push
jobs:
  left:
    on_agent_lost: retry
    steps:
      - run: |
          %s
  right:
    on_agent_lost: retry
    steps:
      - run: |
          %s
`, tickStep(pids, marks["left"], ticks, "0.1"), tickStep(pids, marks["right"], ticks, "0.1"))})
	addLocalSource(t, ca, "app", r.dir)
	secret, _ := agentToken(t, ca, api.CreateTokenRequest{Name: "cluster"})
	other, _ := agentToken(t, ca, api.CreateTokenRequest{Name: "other"})
	agents := map[string]*proc{}
	a1State := scratchDir(t)
	for _, id := range []string{"a1", "a2"} {
		o := agentOpts{id: id}
		if id == "a1" {
			o.stateDir = a1State
		}
		agents[id] = startAgent(t, srvA.URL, secret, o)
	}
	for _, id := range []string{"a1", "a2"} {
		waitConnected(t, ca, id)
	}

	// B146: triggered on B, which has no agent yet: A's agents get the jobs.
	run := triggerOne(t, cb, "app")
	for _, name := range []string{"left", "right"} {
		waitJob(t, cb, run.ID, name, 30*time.Second, "running on one of A's agents", jobIs(kiln.JobRunning))
	}
	for _, id := range []string{"b1", "b2"} {
		agents[id] = startAgent(t, srvB.URL, secret, agentOpts{id: id})
	}
	// B145: every server lists the cluster's agents, each with its server.
	for _, c := range []*api.Client{ca, cb} {
		waittest.UntilState(t, 30*time.Second, "both servers to list all four agents connected", func() (bool, string) {
			as, err := c.Agents(bg)
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, a := range as {
				want := srvA.URL
				if strings.HasPrefix(a.ID, "b") {
					want = srvB.URL
				}
				if a.Connected && a.Coordinator == want {
					got = append(got, a.ID)
				}
			}
			return len(got) == 4, fmt.Sprintf("%+v", as)
		})
	}
	// B144: the id a1, held on A, is refused to another token on B, even
	// with a1's own secret.
	a1Secret, err := os.ReadFile(filepath.Join(a1State, "agent-secret"))
	if err != nil {
		t.Fatal(err)
	}
	raw := dialRaw(t, srvB.URL)
	raw.send(&proto.Auth{ProtocolVersion: proto.Version, Token: other})
	expectFrame[*proto.AuthOK](raw)
	raw.send(&proto.Register{AgentID: "a1", AgentSecret: strings.TrimSpace(string(a1Secret)), Labels: []string{"x"}, MaxJobs: 1, OS: "linux", Arch: "amd64"})
	if e, _, _ := raw.refused(); e.Code != proto.ErrAgentIDInUse {
		t.Fatalf("a1 registered on B with another token: %+v", e)
	}

	run = getRun(t, cb, run.ID)
	victim, survivor := mustJob(t, run, "left"), mustJob(t, run, "right")
	if victim.AgentID != "a1" {
		victim, survivor = survivor, victim
	}
	if victim.AgentID != "a1" || survivor.AgentID != "a2" {
		t.Fatalf("the jobs are not on a1 and a2: %s", describeRun(run))
	}
	waittest.UntilState(t, 30*time.Second, "both jobs to tick", func() (bool, string) {
		return countLines(marks["left"]) >= 3 && countLines(marks["right"]) >= 3, ""
	})
	srvA.signal(t, syscall.SIGKILL)
	agents["a1"].signal(t, syscall.SIGKILL)
	srvA.wait(t, 10*time.Second)
	agents["a1"].wait(t, 10*time.Second)

	// B142, B147: a2 reconnects to B and keeps its job; a1's job is
	// recovered by the leader (B) and runs elsewhere.
	run = waitRun(t, cb, run.ID, 2*time.Minute)
	if run.Status != kiln.RunSuccess {
		t.Fatalf("%s", describeRun(run))
	}
	kept, moved := mustJob(t, run, survivor.Name), mustJob(t, run, victim.Name)
	if kept.AgentID != "a2" || kept.Attempt != 1 || kept.Dispatches != 1 {
		t.Fatalf("the surviving agent's job did not stay with it: %s", describeRun(run))
	}
	if moved.AgentID == "a1" || moved.Attempt != 2 {
		t.Fatalf("the dead agent's job did not run again elsewhere: %s", describeRun(run))
	}
	if runs := markRuns(t, marks[kept.Name]); len(runs) != 1 {
		t.Fatalf("the kept job ran more than once: %v", runs)
	}
	if runs := markRuns(t, marks[moved.Name]); len(runs) != 2 {
		t.Fatalf("the moved job's attempts overlap or one is missing: %v", runs)
	}
	// Every line of the kept job is stored, and the agent resent from its
	// last acknowledgement, not from the start: lines before the kill are
	// on A's disk, the rest on B's (logs live on each server's disk until
	// they move to shared storage). A line A stored in its last moments,
	// whose acknowledgement the kill cut off, is resent and stored on B
	// too (readers merge copies by seq): only such a tail of A's lines
	// may be on both.
	storedOn := func(dir string) map[int]int {
		out := map[int]int{}
		files, _ := filepath.Glob(filepath.Join(dir, "logs", run.ID, kept.ID, "e*", "*.jsonl"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var l struct{ Text string }
				var n int
				if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Text, "tick ") {
					if _, err := fmt.Sscanf(l.Text, "tick %d", &n); err == nil {
						out[n]++
					}
				}
			}
		}
		return out
	}
	onA, onB := storedOn(srvA.dataDir), storedOn(srvB.dataDir)
	lastA, both := 0, 0
	for i := 1; i <= ticks; i++ {
		a, b := onA[i], onB[i]
		switch {
		case a+b == 0:
			t.Fatalf("line tick %d is stored on neither server (A %v, B %v)", i, onA, onB)
		case a > 1 || b > 1:
			t.Fatalf("line tick %d is stored %d times on A and %d on B", i, a, b)
		case a == 1 && b == 1:
			both++
		}
		if a == 1 {
			lastA = i
		}
	}
	for i := 1; i <= lastA-both; i++ {
		if onB[i] > 0 {
			t.Fatalf("line tick %d was stored on A long before the kill and resent to B: the agent replayed acknowledged lines (A %v, B %v)", i, onA, onB)
		}
	}
	if both > 3 {
		t.Fatalf("%d lines are stored on both servers: more than the frames A could have left unacknowledged (A %v, B %v)", both, onA, onB)
	}
	if a, _ := agentByID(t, cb, "a2"); !a.Connected || a.Coordinator != srvB.URL {
		t.Fatalf("a2 is not connected to B: %+v", a)
	}
}
