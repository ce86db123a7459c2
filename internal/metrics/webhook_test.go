package metrics_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/store"
)

const dispatchWorkflow = `name: ci
on:
  dispatch: {}
jobs:
  build:
    runs_on: [linux]
    steps: [{run: make}]
`

const webhookSecret = "s3cret"

// gitRepo makes a repository with the workflow committed on main.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "app")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = filepath.Dir(dir)
		if _, err := os.Stat(dir); err == nil {
			cmd.Dir = dir
		}
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=Ada", "GIT_AUTHOR_EMAIL=ada@example.com", "GIT_COMMITTER_NAME=Ada", "GIT_COMMITTER_EMAIL=ada@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main", dir)
	if err := os.MkdirAll(filepath.Join(dir, ".kiln", "workflows"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".kiln", "workflows", "ci.yml"), []byte(dispatchWorkflow), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", ".")
	git("commit", "-q", "-m", "add ci")
	return dir
}

func addSource(t *testing.T, s *server.Server, fs *forge.Source) {
	t.Helper()
	st, err := ingress.Encode(fs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.Sources().Create(context.Background(), st); err != nil {
		t.Fatal(err)
	}
}

// postGitHub sends a GitHub webhook signed with sig ("" signs it right).
func postGitHub(t *testing.T, s *server.Server, source, event, id, sig string) int {
	t.Helper()
	// Each delivery its own body: one signed body under two ids is a replay
	// (B116).
	body := []byte(fmt.Sprintf(`{"zen":"Keep it logically awesome.","delivery":%q}`, id))
	req, err := http.NewRequest("POST", s.URL+"/webhook/github/"+source, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if sig == "" {
		sig = forge.Sign([]byte(webhookSecret), body)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-Hub-Signature-256", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Delivery outcomes through the real webhook endpoint and the manual
// dispatch path: received by source and event, processed by outcome,
// redeliveries deduplicated, refusals by code — and a flood of event names
// a forge may send does not grow the series (unknown events are "other").
// Proves B62 (docs/behaviours.md).
func TestWebhookCountersThroughTheServer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, database func(testing.TB) string) {
		s := startServer(t, database(t), server.Options{}, nil)
		ctx := context.Background()
		addSource(t, s, &forge.Source{Name: "app", Kind: kiln.SourceLocal, Local: &forge.LocalConfig{Path: gitRepo(t)}})
		// The API base is never called: pings and ignored events read nothing.
		addSource(t, s, &forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
			APIBase: "http://127.0.0.1:9", Token: "t", WebhookSecret: webhookSecret}})

		for _, wf := range []string{"ci.yml", "nope.yml"} {
			id, err := s.Ingress.Dispatch(ctx, ingress.DispatchRequest{Source: "app", Workflow: wf})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.Ingress.Wait(id):
			case <-time.After(20 * time.Second):
				t.Fatalf("dispatch of %s not finished", wf)
			}
		}
		f := scrape(t, s)
		f.want(t, 2, "kiln_webhooks_received_total", "source", "app", "event", "dispatch")
		f.want(t, 1, "kiln_webhooks_processed_total", "result", "processed")
		f.want(t, 1, "kiln_webhooks_processed_total", "result", "no_match")

		const flood = 20
		for i := range flood {
			if code := postGitHub(t, s, "gh", fmt.Sprintf("custom_event_%d", i), fmt.Sprintf("d-%d", i), ""); code != http.StatusAccepted {
				t.Fatalf("event %d: status %d", i, code)
			}
		}
		if code := postGitHub(t, s, "gh", "custom_event_0", "d-0", ""); code != http.StatusAccepted { // a redelivery
			t.Fatalf("redelivery: status %d", code)
		}
		if code := postGitHub(t, s, "gh", "ping", "d-ping", ""); code != http.StatusAccepted {
			t.Fatalf("ping: status %d", code)
		}
		if code := postGitHub(t, s, "gh", "push", "d-forged", "sha256=00"); code != http.StatusUnauthorized {
			t.Fatalf("forged: status %d", code)
		}
		if code := postGitHub(t, s, "no-such-source", "push", "d-x", ""); code != http.StatusNotFound {
			t.Fatalf("unknown source: status %d", code)
		}

		f = scrapeUntil(t, s, "the flood ignored and the ping answered", func(f families) bool {
			ignored, _ := f.value("kiln_webhooks_processed_total", "result", "ignored")
			ping, _ := f.value("kiln_webhooks_processed_total", "result", "ping")
			return ignored == flood && ping == 1
		})
		f.want(t, flood+1, "kiln_webhooks_received_total", "source", "gh", "event", "other")
		f.want(t, 1, "kiln_webhooks_received_total", "source", "gh", "event", "ping")
		if n := f.series("kiln_webhooks_received_total"); n != 3 {
			t.Fatalf("%d series of kiln_webhooks_received_total, want 3 (app/dispatch, gh/other, gh/ping)", n)
		}
		f.want(t, 1, "kiln_dedup_hits_total")
		f.want(t, 1, "kiln_webhooks_processed_total", "result", "duplicate")
		f.want(t, 1, "kiln_webhooks_refused_total", "code", "unauthorized")
		f.want(t, 1, "kiln_webhooks_refused_total", "code", "not_found")
		if d, err := s.DB.Ingress().List(ctx, store.DeliveryFilter{Limit: 100}); err != nil || len(d) != flood+4 {
			t.Fatalf("event log: %d deliveries (%v), want %d", len(d), err, flood+4)
		}
	})
}
