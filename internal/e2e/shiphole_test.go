package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

const holeWorkflow = `on: push
jobs:
  build:
    steps:
      - run: |
          for i in $(seq 1 20); do echo "line $i"; done
          sleep 1
          echo "acknowledged by now"
          for i in $(seq 1 1200); do [ -f "$GATE" ] && break; sleep 0.05; done
          for i in $(seq 21 40); do echo "line $i"; done
        env: {GATE: "%s"}
`

// B153: two servers on one PostgreSQL database with S3 storage. Server A,
// which ships logs only once an hour, stores lines 1..20 of a running
// step and is SIGKILLed before shipping them; the agent goes on with
// server B, which stores and ships lines 21..40, and the run succeeds.
// B's `kiln logs` then lacks 1..20 (they are on A's disk only). A
// restarts, with the same hour-long interval, and ships them at start
// although B's later lines are in the bucket already: `kiln logs` on B
// prints lines 1..40, each once, in order, and so does the API on A.
//
// A acknowledges stored frames lazily (within the fleet's ackDelay, 5 ms),
// so "line 20" on A's disk does not yet mean the agent holds its ack: were
// A killed then, the agent would rightly replay lines 1..20 to B. The step
// therefore pauses a second before its marker line, and A is killed once
// the marker is on its disk: by then the ack for lines 1..20 went out.
//
// Proves B153 (docs/behaviours.md).
func TestLinesOfAKilledServerAreShippedWhenItRestarts(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	s3args, env := s3Storage(t)
	args := append(clusterArgs(dbURL), s3args...)
	srvA := startServerProcEnv(t, t.TempDir(), 0, env, append(args, "--set", "storage.log_ship_interval=1h")...)
	ca := procClient(t, srvA)
	gate := filepath.Join(t.TempDir(), "gate")
	r := newRepo(t, map[string]string{workflow("hole"): fmt.Sprintf(holeWorkflow, gate)})
	addLocalSource(t, ca, "app", r.dir)
	secret, _ := agentToken(t, ca, api.CreateTokenRequest{Name: "a"})
	agent := startAgent(t, srvA.URL, secret, agentOpts{id: "a1"})
	waitConnected(t, ca, "a1")
	srvB := startServerProcEnv(t, t.TempDir(), 0, env, args...)
	cb, err := api.NewClient(srvB.URL, srvA.adminToken(t))
	if err != nil {
		t.Fatal(err)
	}
	// The agent, told only of A, learns of B before A goes (B139).
	hostB := strings.TrimPrefix(srvB.URL, "http://")
	waittest.UntilState(t, 30*time.Second, "the agent to learn of server B", func() (bool, string) {
		for _, line := range strings.Split(agent.log.String(), "\n") {
			if strings.Contains(line, "coordinators changed") && strings.Contains(line, hostB) {
				return true, ""
			}
		}
		return false, tail(agent.log.String(), 5)
	})

	run := triggerOne(t, ca, "app")
	job := waitJob(t, cb, run.ID, "build", 30*time.Second, "running on A's agent", jobIs(kiln.JobRunning))
	files := filepath.Join(srvA.dataDir, "logs", run.ID, job.ID, "e*", "0.jsonl")
	waittest.UntilState(t, 30*time.Second, "A to store line 20 and the marker after it", func() (bool, string) {
		m, _ := filepath.Glob(files)
		for _, f := range m {
			if b, _ := os.ReadFile(f); strings.Contains(string(b), `"acknowledged by now"`) {
				return true, ""
			}
		}
		return false, fmt.Sprint(m)
	})
	srvA.signal(t, syscall.SIGKILL)
	srvA.wait(t, 10*time.Second)
	waittest.UntilState(t, 30*time.Second, "the agent to go on with B", func() (bool, string) {
		a, _ := agentByID(t, cb, "a1")
		return a.Connected && a.Coordinator == srvB.URL, fmt.Sprintf("%+v", a)
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if done := waitRun(t, cb, run.ID, 2*time.Minute); done.Status != kiln.RunSuccess {
		t.Fatalf("%s", describeRun(done))
	}

	ob := newOperator(t, srvB.URL, srvA.adminToken(t))
	before := numberedLines(ob.run(0, "logs", strconv.FormatInt(run.Number, 10), "build").stdout)
	if len(before) == 0 || before[0] != 21 {
		t.Fatalf("before A restarts B should print lines 21..40 only (1..20 are on A's disk): %v", before)
	}

	srvA.restart(t)
	var got []int
	waittest.UntilState(t, time.Minute, "kiln logs on B to print every line", func() (bool, string) {
		got = numberedLines(ob.run(0, "logs", strconv.FormatInt(run.Number, 10), "build").stdout)
		return len(got) >= 40, fmt.Sprint(got)
	})
	for i, n := range got {
		if n != i+1 || len(got) != 40 {
			t.Fatalf("kiln logs on B printed the lines %v; want 1..40, each once, in order", got)
		}
	}
	var onA []int
	for _, text := range texts(logLines(t, procClient(t, srvA), run.ID, "build", intp(0))) {
		onA = append(onA, numberedLines(text)...)
	}
	if len(onA) != 40 || onA[0] != 1 || onA[39] != 40 {
		t.Fatalf("the API on A (its file ends at line 20) returned %v", onA)
	}
}

var numberedLine = regexp.MustCompile(`(?m)\bline (\d+)$`)

// numberedLines returns the n of every "line n" in out, in order.
func numberedLines(out string) []int {
	var ns []int
	for _, m := range numberedLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		ns = append(ns, n)
	}
	return ns
}
