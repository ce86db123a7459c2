package e2e

import (
	"net/http"
	"net/http/httptest"
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
)

// stallingAPI fronts a fake GitHub that never answers the first request for
// repository contents: it hangs until its caller goes away. The server that
// makes it is stuck in the middle of processing a delivery — claimed, not
// finished — for as long as it lives; every later request is answered.
// stalled is closed when the first request arrives.
type stallingAPI struct {
	*httptest.Server
	stalled chan struct{}
	once    sync.Once
}

func newStallingAPI(t testing.TB, gh *forgetest.GitHub) *stallingAPI {
	s := &stallingAPI{stalled: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := false
		if strings.Contains(r.URL.Path, "/contents/") {
			s.once.Do(func() { first = true })
		}
		if first {
			close(s.stalled)
			<-r.Context().Done() // never answered: the caller dies first
			return
		}
		gh.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// Two servers share one PostgreSQL database. A GitHub delivery is sent to
// server A, which records it (202), claims it and starts processing it —
// and hangs reading the workflows from a forge that never answers it. A is
// SIGKILLed there, its claim still held. Server B, which never received
// the delivery, takes it over once the claim lease lapses and processes
// it: exactly one run results, on B's agent, and it succeeds; the
// delivery says it took two attempts.
//
// B134.
func TestDeliveryClaimedByAKilledServerIsTakenOverByAnother(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	gh := forgetest.NewGitHub(t)
	gh.Token = ghAPIToken
	gh.SetFiles(ghRepo, ghPushSHA, "master", map[string]string{workflow("ci"): `on: push
jobs:
  hello:
    checkout: false
    steps:
      - run: echo hello from ${{ event.sha }}
`})
	forgeAPI := newStallingAPI(t, gh)
	args := append(clusterArgs(dbURL), "--set", "webhooks.claim_lease=3s")
	srvA := startServerProc(t, t.TempDir(), 0, args...)
	ca := procClient(t, srvA)
	srvB := startServerProc(t, t.TempDir(), 0, args...)
	cb, err := api.NewClient(srvB.URL, srvA.adminToken(t))
	if err != nil {
		t.Fatal(err)
	}
	src := forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: forgeAPI.URL, Token: ghAPIToken, WebhookSecret: ghSecret}}
	if _, err := ca.AddSource(bg, src); err != nil {
		t.Fatal(err)
	}
	secret, _ := agentToken(t, ca, api.CreateTokenRequest{})
	startAgent(t, srvB.URL, secret, agentOpts{id: "on-b"})
	waitConnected(t, cb, "on-b")

	code, out := sendGitHub(t, srvA.URL+"/webhook/github/gh", "push", "takeover-1", ghPayload(t, "push.with-new-branch.payload.json"), ghSecret)
	id := acceptedDelivery(t, code, out)
	select {
	case <-forgeAPI.stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("server A never asked the forge for the workflows")
	}
	if d, err := cb.Event(bg, id); err != nil || d.Status != kiln.DeliveryReceived {
		t.Fatalf("the delivery while A processes it: %+v %v", d, err)
	}
	srvA.signal(t, syscall.SIGKILL)
	srvA.wait(t, 10*time.Second)
	killed := time.Now()

	d := waitDelivery(t, cb, id)
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 || d.Attempts != 2 || d.ProcessedAt == nil || d.ProcessedAt.Before(killed) {
		t.Fatalf("the delivery after A died: %s (attempts %d)", describeDelivery(d), d.Attempts)
	}
	run := waitRun(t, cb, d.Runs[0].ID, time.Minute)
	if j := mustJob(t, run, "hello"); run.Status != kiln.RunSuccess || j.AgentID != "on-b" {
		t.Fatalf("%s", describeRun(run))
	}
	if n := runCount(t, cb); n != 1 {
		t.Fatalf("%d runs, want exactly 1", n)
	}
	if say := texts(logLines(t, cb, run.ID, "hello", intp(0))); len(say) != 1 || say[0] != "hello from "+ghPushSHA {
		t.Fatalf("the step said %q", say)
	}
}
