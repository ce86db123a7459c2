package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/forge/forgetest"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
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
// Proves B51 (docs/behaviours.md).
func TestOrchestratorKilledAndRestartedMidStepKeepsEveryLogLineOnce(t *testing.T) {
	t.Parallel()
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			var extra []string
			if b.Name != "sqlite" {
				extra = []string{"--database", b.URL(t)}
			}
			testOrchestratorRestart(t, extra)
		})
	}
}

func testOrchestratorRestart(t *testing.T, extra []string) {
	const n = 600
	// The agent keeps its job through a crash for recovery_window −
	// lease_margin after its last answered heartbeat (B126): longer than
	// a restart on a loaded machine takes.
	extra = append(extra, "--set", "agents.recovery_window=30s")
	srv := startServerProc(t, t.TempDir(), 0, extra...)
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
	waittest.UntilState(t, time.Minute, "a quarter of the lines to be stored", func() (bool, string) {
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

// gatedAPI fronts a fake GitHub: requests for repository contents wait
// until the gate opens (or the caller goes away), so a test can hold a
// delivery in the middle of its processing. seen is closed by the first
// request that waits.
type gatedAPI struct {
	*httptest.Server
	gate chan struct{}
	seen chan struct{}
	once sync.Once
}

func newGatedAPI(t testing.TB, gh *forgetest.GitHub) *gatedAPI {
	g := &gatedAPI{gate: make(chan struct{}), seen: make(chan struct{})}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/contents/") {
			g.once.Do(func() { close(g.seen) })
			select {
			case <-g.gate:
			case <-r.Context().Done():
				return
			}
		}
		gh.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(g.Close)
	return g
}

// A server killed (SIGKILL) right after it answered 202 — while the
// delivery is being processed — processes it after the restart, exactly
// once: one run, and the real agent runs it.
// Proves B8 (docs/behaviours.md).
func TestWebhookAcceptedBeforeACrashIsProcessedOnceAfterRestart(t *testing.T) {
	t.Parallel()
	gh := forgetest.NewGitHub(t)
	gh.Token = ghAPIToken
	gh.SetFiles(ghRepo, ghPushSHA, "master", map[string]string{workflow("ci"): `on: push
jobs:
  hello:
    checkout: false
    steps:
      - run: echo hello from ${{ event.sha }}
`})
	gated := newGatedAPI(t, gh)
	srv := startServerProc(t, t.TempDir(), 0, "--set", "webhooks.claim_lease=2s")
	c := procClient(t, srv)
	src := forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: gated.URL, Token: ghAPIToken, WebhookSecret: ghSecret}}
	if _, err := c.AddSource(bg, src); err != nil {
		t.Fatal(err)
	}
	secret, _ := agentToken(t, c, api.CreateTokenRequest{})
	startAgent(t, srv.URL, secret, agentOpts{id: "after-crash"})

	code, out := sendGitHub(t, srv.URL+"/webhook/github/gh", "push", "crash-1", ghPayload(t, "push.with-new-branch.payload.json"), ghSecret)
	id := acceptedDelivery(t, code, out)
	select {
	case <-gated.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the server never read the workflows")
	}
	srv.signal(t, syscall.SIGKILL)
	srv.wait(t, 10*time.Second)
	close(gated.gate)
	restarted := time.Now()
	srv.restart(t)

	d := waitDelivery(t, c, id)
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 || d.ProcessedAt == nil || d.ProcessedAt.Before(restarted) {
		t.Fatalf("delivery after the restart: %s", describeDelivery(d))
	}
	run := waitRun(t, c, d.Runs[0].ID, time.Minute)
	if run.Status != kiln.RunSuccess || run.SHA != ghPushSHA {
		t.Fatalf("%s", describeRun(run))
	}
	if n := runCount(t, c); n != 1 {
		t.Fatalf("%d runs, want exactly 1", n)
	}
	if say := texts(logLines(t, c, run.ID, "hello", intp(0))); len(say) != 1 || say[0] != "hello from "+ghPushSHA {
		t.Fatalf("the step said %q", say)
	}
}
