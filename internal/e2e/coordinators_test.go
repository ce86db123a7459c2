package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// An agent registers with server A while A is the only server on the
// PostgreSQL database, so its register.ack names A alone. Server B starts
// on the same database: A tells the agent (a coordinators frame), which
// logs the new list. A is SIGKILLed; the agent, given only A's URL on its
// command line, reconnects to B, and a job queued on B after the kill runs
// on it there.
//
// Proves B139 (docs/behaviours.md).
func TestAgentLearnsOfALaterServerAndFailsOverToIt(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	srvA := startServerProc(t, t.TempDir(), 0, clusterArgs(dbURL)...)
	ca := procClient(t, srvA)
	r := newRepo(t, map[string]string{workflow("ci"): `on: push
jobs:
  hello:
    steps:
      - run: echo hello
`})
	addLocalSource(t, ca, "app", r.dir)
	secret, _ := agentToken(t, ca, api.CreateTokenRequest{Name: "early"})
	agent := startAgent(t, srvA.URL, secret, agentOpts{id: "early"})
	if a := waitConnected(t, ca, "early"); a.Coordinator != srvA.URL {
		t.Fatalf("the agent is connected to %s, not A (%s)", a.Coordinator, srvA.URL)
	}
	if strings.Contains(agent.log.String(), "coordinators changed") {
		t.Fatalf("the agent was told of other servers before B started:\n%s", agent.log.String())
	}

	srvB := startServerProc(t, t.TempDir(), 0, clusterArgs(dbURL)...)
	cb, err := api.NewClient(srvB.URL, srvA.adminToken(t)) // one database, one set of tokens
	if err != nil {
		t.Fatal(err)
	}
	hostB := strings.TrimPrefix(srvB.URL, "http://")
	waittest.UntilState(t, 30*time.Second, "the agent to learn of server B from A", func() (bool, string) {
		for _, line := range strings.Split(agent.log.String(), "\n") {
			if strings.Contains(line, "coordinators changed") && strings.Contains(line, hostB) {
				return true, ""
			}
		}
		return false, tail(agent.log.String(), 5)
	})

	srvA.signal(t, syscall.SIGKILL)
	srvA.wait(t, 10*time.Second)
	run := waitRun(t, cb, triggerOne(t, cb, "app").ID, 2*time.Minute)
	if j := mustJob(t, run, "hello"); run.Status != kiln.RunSuccess || j.AgentID != "early" {
		t.Fatalf("the job queued on B after A died: %s", describeRun(run))
	}
	if a, _ := agentByID(t, cb, "early"); !a.Connected || a.Coordinator != srvB.URL {
		t.Fatalf("the agent is not connected to B: %+v", a)
	}
}
