package e2e

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
)

// procClient is an API client of a server process with its admin token.
func procClient(t testing.TB, s *serverProc) *api.Client {
	t.Helper()
	c, err := api.NewClient(s.URL, s.adminToken(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The orchestrator is killed (SIGKILL) while a step prints numbered lines
// and started again on the same port and data directory: the agent keeps
// running the step, reconnects, keeps its job (same lease, one dispatch),
// replays what was not acknowledged, and the stored log holds every line
// 1..N exactly once, in order.
func TestOrchestratorKilledAndRestartedMidStepKeepsEveryLogLineOnce(t *testing.T) {
	t.Parallel()
	const n = 600
	srv := startServerProc(t, t.TempDir(), 0)
	c := procClient(t, srv)
	r := newRepo(t, map[string]string{workflow("count"): fmt.Sprintf(`on: push
jobs:
  count:
    steps:
      - name: numbers
        run: for i in $(seq 1 %d); do echo $i; sleep 0.01; done
`, n)})
	addLocalSource(t, c, "app", r.dir)
	secret, _ := agentToken(t, c, api.CreateTokenRequest{})
	agent := startAgent(t, srv.URL, secret, agentOpts{id: "printer"})

	run := triggerOne(t, c, "app")
	waitFor(t, time.Minute, "a quarter of the lines to be stored", func() (bool, string) {
		var last uint64
		err := c.Logs(bg, run.ID, api.LogQuery{Job: "count", Step: intp(0), Limit: 100000}, func(l api.LogLine) error {
			last = l.Seq
			return nil
		})
		return err == nil && last >= n/4, fmt.Sprint(last, err)
	})
	srv.signal(t, syscall.SIGKILL)
	srv.wait(t, 10*time.Second)
	srv.restart(t)
	run = waitRun(t, c, run.ID, 2*time.Minute)
	if run.Status != kiln.RunSuccess {
		t.Fatalf("%s", describeRun(run))
	}
	lines := logLines(t, c, run.ID, "count", intp(0))
	if len(lines) != n {
		t.Fatalf("the step's log holds %d lines, want %d", len(lines), n)
	}
	for i, l := range lines {
		if l.Text != strconv.Itoa(i+1) || l.Stream != "stdout" {
			t.Fatalf("line %d is %q (%s)", i+1, l.Text, l.Stream)
		}
	}
	if j := mustJob(t, run, "count"); j.Attempt != 1 || j.Dispatches != 1 || j.AgentID != "printer" {
		t.Fatalf("the job was dispatched again: attempt %d, dispatches %d, agent %s", j.Attempt, j.Dispatches, j.AgentID)
	}
	if agent.exited() {
		t.Fatal("the agent process exited")
	}
}
