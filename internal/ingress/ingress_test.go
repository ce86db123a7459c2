package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/forge/forgetest"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

const (
	secret  = "s3cret"
	repo    = "Codertocat/Hello-World"
	headSHA = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
)

const ciYAML = `
on:
  push: {branches: [master]}
jobs:
  build:
    steps: [{run: make}]
`

type fixture struct {
	db    *store.DB
	eng   *engine.Engine
	proc  *Processor
	gh    *forgetest.GitHub
	srv   *httptest.Server
	clock *storetest.Clock
}

func newFixture(t *testing.T, url func(testing.TB) string, opts ...func(*Config)) *fixture {
	t.Helper()
	clock := storetest.NewClock()
	db, err := store.Open(context.Background(), store.Config{URL: url(t), Clock: clock.Now, Releaser: engine.Release})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	eng := engine.New(db, nil, engine.Config{Clock: clock.Now})
	gh := forgetest.NewGitHub(t)
	gh.SetFiles(repo, headSHA, "master", map[string]string{".kiln/workflows/ci.yml": ciYAML})
	srcs := NewSources(db, forge.Options{})
	cfg := Config{PollInterval: 20 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	proc := New(db, eng, srcs, cfg)
	st, err := Encode(&forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{APIBase: gh.URL, Token: "t", WebhookSecret: secret}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Sources().Create(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhook/{kind}/{source}", proc.Webhook)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { proc.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &fixture{db: db, eng: eng, proc: proc, gh: gh, srv: srv, clock: clock}
}

func forEach(t *testing.T, fn func(t *testing.T, f *fixture)) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) { fn(t, newFixture(t, b.URL)) })
	}
}

func payload(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../trigger/testdata/github/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *fixture) send(t *testing.T, event, id string, body []byte, sig string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+"/webhook/github/gh", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", id)
	if sig == "" {
		sig = forge.Sign([]byte(secret), body)
	}
	req.Header.Set("X-Hub-Signature-256", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// finished polls until the delivery is processed.
func (f *fixture) finished(t *testing.T, id int64) store.Delivery {
	t.Helper()
	var d store.Delivery
	waittest.Until(t, waittest.Timeout, fmt.Sprintf("delivery %d to be processed", id), func() bool {
		var err error
		d, err = f.db.Ingress().Get(context.Background(), id)
		return err == nil && d.Status != kiln.DeliveryReceived
	})
	return d
}

func deliveryID(t *testing.T, out map[string]any) int64 {
	t.Helper()
	v, ok := out["delivery"].(float64)
	if !ok {
		t.Fatalf("no delivery id in %v", out)
	}
	return int64(v)
}

// Proves B2 and B12 (docs/behaviours.md).
func TestGitHubPushCreatesARunOnceAndDuplicatesAreRecognised(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		body := payload(t, "push.with-new-branch.payload.json")
		code, out := f.send(t, "push", "d-1", body, "")
		if code != http.StatusAccepted {
			t.Fatalf("status %d: %v", code, out)
		}
		d := f.finished(t, deliveryID(t, out))
		if d.Status != kiln.DeliveryProcessed || len(d.RunIDs) != 1 {
			t.Fatalf("delivery: %s %q runs %v", d.Status, d.Message, d.RunIDs)
		}
		run, err := f.db.Runs().Get(context.Background(), d.RunIDs[0])
		if err != nil {
			t.Fatal(err)
		}
		if run.SHA != headSHA || run.Workflow != "ci" || run.Jobs[0].Status != kiln.JobQueued || !strings.Contains(string(run.Trace), "master") {
			t.Fatalf("run: sha %s workflow %s job %s trace %s", run.SHA, run.Workflow, run.Jobs[0].Status, run.Trace)
		}
		code, out = f.send(t, "push", "d-1", body, "")
		if code != http.StatusAccepted || out["duplicate"] != true {
			t.Fatalf("redelivery: %d %v", code, out)
		}
		runs, _ := f.db.Runs().List(context.Background(), store.RunFilter{Limit: 10})
		if len(runs) != 1 {
			t.Fatalf("%d runs after a duplicate delivery", len(runs))
		}
	})
}

// Proves B1 (docs/behaviours.md).
func TestBadSignatureIsRefusedAndRecordsNothing(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		body := payload(t, "push.with-new-branch.payload.json")
		for _, sig := range []string{"sha256=" + strings.Repeat("0", 64), "sha1=abc", "garbage"} {
			code, out := f.send(t, "push", "d-2", body, sig)
			if code != http.StatusUnauthorized {
				t.Fatalf("%s: status %d %v", sig, code, out)
			}
		}
		if ds, _ := f.db.Ingress().List(context.Background(), store.DeliveryFilter{Limit: 10}); len(ds) != 0 {
			t.Fatalf("refused deliveries were recorded: %d", len(ds))
		}
		// The same delivery id, properly signed, is not treated as a duplicate.
		code, out := f.send(t, "push", "d-2", body, "")
		if code != http.StatusAccepted || out["duplicate"] == true {
			t.Fatalf("signed delivery after forged ones: %d %v", code, out)
		}
	})
}

// Proves B9 (docs/behaviours.md).
func TestOutcomesOfDeliveriesThatStartNothing(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		cases := []struct {
			event, file string
			want        kiln.DeliveryStatus
			msg         string
		}{
			{"ping", "ping.payload.json", kiln.DeliveryPing, "ping"},
			{"push", "push.payload.json", kiln.DeliveryIgnored, "delet"},
			{"pull_request", "pull_request.opened.payload.json", kiln.DeliveryNoMatch, "no workflow matched"},
		}
		f.gh.SetFiles(repo, "ec26c3e57ca3a959ca5aad62de7213c562f8c821", "", map[string]string{".kiln/workflows/ci.yml": ciYAML})
		for i, c := range cases {
			code, out := f.send(t, c.event, "o-"+string(rune('a'+i)), payload(t, c.file), "")
			if code != http.StatusAccepted {
				t.Fatalf("%s: %d %v", c.event, code, out)
			}
			d := f.finished(t, deliveryID(t, out))
			if d.Status != c.want || !strings.Contains(d.Message, c.msg) {
				t.Errorf("%s: %s %q, want %s containing %q", c.event, d.Status, d.Message, c.want, c.msg)
			}
		}
	})
}

// Proves B9 (docs/behaviours.md).
func TestInvalidWorkflowIsRecordedWithTheLintErrors(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		f.gh.SetFiles(repo, headSHA, "master", map[string]string{
			".kiln/workflows/ci.yml":  ciYAML,
			".kiln/workflows/bad.yml": "on: push\njobs:\n  a:\n    needs: [b]\n    steps: [{run: x}]\n",
		})
		_, out := f.send(t, "push", "inv", payload(t, "push.with-new-branch.payload.json"), "")
		d := f.finished(t, deliveryID(t, out))
		if d.Status != kiln.DeliveryInvalidWorkflow || !strings.Contains(d.Message, `.kiln/workflows/bad.yml:4`) {
			t.Fatalf("%s %q", d.Status, d.Message)
		}
		if runs, _ := f.db.Runs().List(context.Background(), store.RunFilter{Limit: 5}); len(runs) != 0 {
			t.Fatalf("a repository with a broken workflow started %d runs", len(runs))
		}
	})
}

// Proves B8, B134 (docs/behaviours.md).
func TestDeliveryOfADeadServerIsTakenOverExactlyOnce(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		st, _, _ := f.proc.sources.ByName(ctx, "gh")
		// A server recorded and claimed this delivery, answered 202, and died.
		id, _, err := f.db.Ingress().Record(ctx, store.NewDelivery{
			Source: st.ID, DeliveryID: "crashed", Event: "push", Body: payload(t, "push.with-new-branch.payload.json"),
			Headers: map[string]string{headerKind: "github"}, Owner: "dead-server", ClaimFor: 50 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Second) // the dead server's claim lapses
		d := f.finished(t, id)       // and this processor's poll takes the delivery over
		if d.Status != kiln.DeliveryProcessed || len(d.RunIDs) != 1 {
			t.Fatalf("taken-over delivery: %s %q", d.Status, d.Message)
		}
		// B134: the dead server's attempt counts; the takeover is the second.
		if d.Attempts != 2 {
			t.Fatalf("taken-over delivery: %d attempts, want 2", d.Attempts)
		}
		// The dead server cannot finish it again.
		if err := f.db.Ingress().Finish(ctx, id, "dead-server", kiln.DeliveryProcessed, "", nil); kiln.ErrorCode(err) != kiln.CodeConflict {
			t.Fatalf("second finish: %v", err)
		}
		runs, _ := f.db.Runs().List(ctx, store.RunFilter{Limit: 5})
		if len(runs) != 1 {
			t.Fatalf("%d runs, want exactly 1", len(runs))
		}
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// A captured, correctly signed body replayed under a new delivery id (the
// signature covers the body, not the id) is recognised by the body's hash
// within the dedup window: recorded as a duplicate saying so, no second run.
// Proves B116 (docs/behaviours.md).
func TestSignedBodyReplayedUnderANewDeliveryIDIsADuplicate(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		body := payload(t, "push.with-new-branch.payload.json")
		code, out := f.send(t, "push", "original", body, "")
		if code != http.StatusAccepted || out["duplicate"] == true {
			t.Fatalf("first delivery: %d %v", code, out)
		}
		f.finished(t, deliveryID(t, out))
		for _, id := range []string{"replay-1", "replay-2"} {
			code, out = f.send(t, "push", id, body, "")
			if code != http.StatusAccepted || out["duplicate"] != true {
				t.Fatalf("replay %s: %d %v", id, code, out)
			}
			d, err := f.db.Ingress().Get(context.Background(), deliveryID(t, out))
			if err != nil || d.Status != kiln.DeliveryDuplicate || !strings.Contains(d.Message, "replay under a new delivery id") {
				t.Fatalf("replay %s recorded as %+v %v", id, d, err)
			}
		}
		if runs, _ := f.db.Runs().List(context.Background(), store.RunFilter{Limit: 10}); len(runs) != 1 {
			t.Fatalf("%d runs after replays", len(runs))
		}
	})
}

// A delivery is handed to the workers as recorded, without being read back;
// one whose body is larger than handBodyMax is read back by the worker,
// and both become runs.
func TestLargeAndSmallDeliveriesAreProcessed(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		small := payload(t, "push.with-new-branch.payload.json")
		large := append(slices.Clone(small), strings.Repeat(" ", handBodyMax)...)
		for i, body := range [][]byte{small, large} {
			code, out := f.send(t, "push", fmt.Sprintf("size-%d", i), body, "")
			if code != http.StatusAccepted {
				t.Fatalf("status %d: %v", code, out)
			}
			if d := f.finished(t, deliveryID(t, out)); d.Status != kiln.DeliveryProcessed || len(d.RunIDs) != 1 {
				t.Fatalf("delivery of %d bytes: %s %q runs %v", len(body), d.Status, d.Message, d.RunIDs)
			}
		}
	})
}
