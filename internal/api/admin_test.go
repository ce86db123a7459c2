package api_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
)

func githubSource(name string) forge.Source {
	return forge.Source{Name: name, Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{Token: "ghp_secret", WebhookSecret: "hook-secret"}}
}

// Proves B34 (docs/behaviours.md).
func TestQueueShowsWaitingJobsWithReasons(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		h.Dispatch(t)
		h.Dispatch(t)
		q, err := h.Client.Queue(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(q.Waiting) != 2 || q.Depth[kiln.JobQueued] != 2 || q.Depth[kiln.JobPending] != 2 || q.ByLabel["linux"] != 2 {
			t.Fatalf("queue: %+v", q)
		}
		w := q.Waiting[0]
		if w.Job != "build" || w.RunNumber != 1 || w.Workflow != "ci" || w.Reason == "" || w.Since == nil || !slices.Equal(w.RunsOn, kiln.Labels{"linux"}) {
			t.Fatalf("waiting job: %+v", w)
		}
		if one, _ := h.Client.Queue(ctx, 1); len(one.Waiting) != 1 {
			t.Fatalf("limit 1: %d", len(one.Waiting))
		}
		wantError(t, h, 400, kiln.CodeInvalid, "GET", "/api/v1/queue?limit=-1", "", "limit")
	})
}

func TestAgentsMergeTheFleetAndTheStore(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		now := time.Now()
		for _, rec := range []store.AgentRecord{
			{ID: "a-live", Labels: apitest.Linux, Hostname: "host1", Version: "1.0"},
			{ID: "b-gone", Labels: kiln.AgentLabels{Labels: kiln.NewLabels("linux", "gpu"), Mandatory: kiln.NewLabels("gpu")}, Hostname: "host2"},
		} {
			if err := h.DB.Auth().UpsertAgent(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.DB.Auth().SetAgentConnected(ctx, "b-gone", false); err != nil {
			t.Fatal(err)
		}
		h.Fleet.Connect(api.AgentView{ID: "a-live", Labels: []string{"linux", "amd64"}, MaxJobs: 2, ActiveJobs: 1,
			Healthy: true, ConnectedAt: now, LastHeartbeat: now, TokenID: "tok1"})
		agents, err := h.Client.Agents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(agents) != 2 {
			t.Fatalf("agents: %+v", agents)
		}
		live, gone := agents[0], agents[1]
		if live.State != api.AgentConnected || !live.Connected || live.Hostname != "host1" || live.ActiveJobs != 1 || live.MaxJobs != 2 || live.ConnectedAt == nil {
			t.Fatalf("live: %+v", live)
		}
		if gone.State != api.AgentDisconnected || gone.Connected || !slices.Equal(gone.Mandatory, kiln.Labels{"gpu"}) || gone.LastSeen == nil {
			t.Fatalf("gone: %+v", gone)
		}
		drained, err := h.Client.DrainAgent(ctx, "a-live")
		if err != nil || drained.State != api.AgentDraining || !drained.Draining {
			t.Fatalf("drain: %+v, %v", drained, err)
		}
		wantError(t, h, 404, kiln.CodeNotFound, "POST", "/api/v1/agents/b-gone/drain", "", "not connected")
		if !slices.Equal(h.Fleet.Drained, []string{"a-live"}) {
			t.Fatalf("drained: %v", h.Fleet.Drained)
		}
	})
}

func TestTokensCreateListRevoke(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		created, err := h.Client.CreateToken(ctx, api.CreateTokenRequest{Name: "gpu box", Labels: []string{"Linux", "gpu"},
			Mandatory: []string{"gpu"}, TTL: "1h", SingleUse: true})
		if err != nil {
			t.Fatal(err)
		}
		tk := created.Token
		if !strings.HasPrefix(created.Secret, store.AgentTokenPrefix) || !strings.HasPrefix(created.Secret, tk.Prefix) {
			t.Fatalf("secret %q, prefix %q", created.Secret, tk.Prefix)
		}
		if tk.State != api.TokenActive || !slices.Equal(tk.Labels, kiln.Labels{"gpu", "linux"}) || !tk.SingleUse ||
			tk.ExpiresAt == nil || time.Until(*tk.ExpiresAt) < 50*time.Minute || tk.CreatedBy != "api:tests" {
			t.Fatalf("token: %+v", tk)
		}
		plain, err := h.Client.CreateToken(ctx, api.CreateTokenRequest{})
		if err != nil || plain.Token.Labels != nil || plain.Token.ExpiresAt != nil {
			t.Fatalf("unscoped token: %+v, %v", plain, err)
		}
		if _, err := h.DB.Auth().AuthenticateAgent(ctx, created.Secret); err != nil {
			t.Fatalf("the new secret does not authenticate: %v", err)
		}
		h.Fleet.Connect(api.AgentView{ID: "gpu-1", TokenID: tk.ID, Healthy: true})
		if err := h.Client.RevokeToken(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(h.Fleet.Disconnected, []string{tk.ID}) || len(h.Fleet.Agents()) != 0 {
			t.Fatalf("revoking did not disconnect the agents using it: %v", h.Fleet.Disconnected)
		}
		list, err := h.Client.Tokens(ctx)
		if err != nil || len(list) != 2 {
			t.Fatalf("list: %+v, %v", list, err)
		}
		for _, l := range list {
			if l.ID == tk.ID && (l.State != api.TokenRevoked || l.RevokedAt == nil) {
				t.Fatalf("revoked token listed as %+v", l)
			}
		}
		status, body := raw(t, h, "GET", "/api/v1/tokens", "")
		if status != 200 || strings.Contains(string(body), created.Secret) || strings.Contains(string(body), "secret") {
			t.Fatalf("a listing shows a secret: %s", body)
		}
		wantError(t, h, 404, kiln.CodeNotFound, "DELETE", "/api/v1/tokens/nope", "", "no agent token")
	})
}

// Proves B78 (docs/behaviours.md).
func TestTokenBadRequestsCreateNothing(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		for body, want := range map[string]string{
			`{"ttl":"forever"}`:                        "ttl",
			`{"ttl":"-1h"}`:                            "ttl",
			`{"labels":["a,b"]}`:                       "labels",
			`{"labels":[]}`:                            "at least one label",
			`{"labels":["linux"],"mandatory":["gpu"]}`: `mandatory label "gpu" is not among`,
			`{"mandatory":["has space"]}`:              "mandatory",
			`{"name":"` + long(200) + `"}`:             "name",
			`{"single_use":"yes"}`:                     "true or false",
			`{"lables":["linux"]}`:                     `unknown field "lables"`,
		} {
			wantError(t, h, 400, kiln.CodeInvalid, "POST", "/api/v1/tokens", body, want)
		}
		if list, _ := h.Client.Tokens(ctx); len(list) != 0 {
			t.Fatalf("refused requests created tokens: %+v", list)
		}
	})
}

// Proves B80 (docs/behaviours.md).
func TestSourcesAreRedactedValidatedAndUnique(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		gh, err := h.Client.AddSource(ctx, githubSource("gh"))
		if err != nil {
			t.Fatal(err)
		}
		if gh.GitHub.Token != forge.Redaction || gh.GitHub.WebhookSecret != forge.Redaction || gh.ID == "" {
			t.Fatalf("created: %+v", gh.GitHub)
		}
		for _, path := range []string{"/api/v1/sources", "/api/v1/sources/gh"} {
			status, body := raw(t, h, "GET", path, "")
			if status != 200 || strings.Contains(string(body), "ghp_secret") || strings.Contains(string(body), "hook-secret") {
				t.Fatalf("%s shows a secret: %s", path, body)
			}
		}
		list, err := h.Client.Sources(ctx)
		if err != nil || len(list) != 2 || list[0].Name != apitest.SourceName || list[1].Name != "gh" {
			t.Fatalf("list: %+v, %v", list, err)
		}
		wantError(t, h, 409, kiln.CodeConflict, "POST", "/api/v1/sources",
			`{"name":"gh","kind":"github","github":{"token":"t","webhook_secret":"s"}}`, "already exists")
		for body, want := range map[string]string{
			`{"name":"Bad Name","kind":"local","local":{"path":"/srv/x"}}`: "source name",
			`{"name":"x","kind":"svn"}`:                                    "not one of",
			`{"name":"x","kind":"local","local":{"path":"rel/x"}}`:         "relative",
			`{"name":"x","kind":"github","github":{"token":"t"}}`:          "webhook secret",
			`{"name":"x","kind":"local","local":{"path":"/x","extra":1}}`:  `unknown field "extra"`,
		} {
			wantError(t, h, 400, kiln.CodeInvalid, "POST", "/api/v1/sources", body, want)
		}
		if err := h.Client.RemoveSource(ctx, "gh"); err != nil {
			t.Fatal(err)
		}
		wantError(t, h, 404, kiln.CodeNotFound, "GET", "/api/v1/sources/gh", "", `no source named "gh"`)
		wantError(t, h, 404, kiln.CodeNotFound, "DELETE", "/api/v1/sources/gh", "", `no source named "gh"`)
		if list, _ := h.Client.Sources(ctx); len(list) != 1 {
			t.Fatalf("after removal: %+v", list)
		}
	})
}

func TestSourceHook(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	hook, err := h.Client.SourceHook(ctx, apitest.SourceName, api.HookQuery{Kiln: "/usr/local/bin/kiln", Server: "http://ci.example:4000", TokenFile: "/etc/kiln/token"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#!/bin/sh", "'/usr/local/bin/kiln'", "export KILN_SERVER='http://ci.example:4000'",
		"export KILN_TOKEN_FILE='/etc/kiln/token'", `trigger "$source" --ref "$ref" --sha "$new" --before "$old"`} {
		if !strings.Contains(hook.Script, want) {
			t.Fatalf("hook lacks %q:\n%s", want, hook.Script)
		}
	}
	if hook.Path != h.Repo || hook.Source != apitest.SourceName {
		t.Fatalf("hook: %+v", hook)
	}
	// The hook the server prints is the one forge installs.
	cfg, _ := api.HookConfigFor(apitest.SourceName, "/usr/local/bin/kiln", "http://ci.example:4000", "/etc/kiln/token")
	src := forge.Source{Name: apitest.SourceName, Kind: kiln.SourceLocal, Local: &forge.LocalConfig{Path: h.Repo}}
	path, err := forge.InstallHook(ctx, &src, cfg, false, forge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != hook.Script || filepath.Base(path) != "post-receive" {
		t.Fatalf("installed hook differs:\n%s", b)
	}
	if _, err := h.Client.AddSource(ctx, githubSource("gh")); err != nil {
		t.Fatal(err)
	}
	wantError(t, h, 400, kiln.CodeInvalid, "GET", "/api/v1/sources/gh/hook", "", "local sources")
	wantError(t, h, 400, kiln.CodeInvalid, "GET", "/api/v1/sources/app/hook?server=ftp://x", "", "http://")
	wantError(t, h, 400, kiln.CodeInvalid, "GET", "/api/v1/sources/app/hook?token_file=token", "", "absolute")
	wantError(t, h, 404, kiln.CodeNotFound, "GET", "/api/v1/sources/ghost/hook", "", "ghost")
	status, _ := raw(t, h, "GET", "/api/v1/sources/app/hook", "")
	if status != http.StatusOK {
		t.Fatalf("hook without options: %d", status)
	}
}
