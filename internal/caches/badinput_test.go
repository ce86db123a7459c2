package caches_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/caches"
	"github.com/kilnci/kiln/internal/store"
)

// B226: the agents' cache routes serve only an agent holding the job under
// its lease epoch with the token it registered with; a key or restore key
// that is empty, too long or holds control characters is refused.
func TestCacheRoutesRefuseStrangersAndBadKeys(t *testing.T) {
	f := newFixture(t, 0)
	srv := httptest.NewServer(f.s.AgentHandler())
	defer srv.Close()
	_, secret, err := f.db.Auth().CreateAgentToken(context.Background(), store.AgentTokenSpec{Name: "box"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path, token, agent string
		status                           int
	}{
		{"no token", "PUT", "/agent/v1/jobs/j1/cache?epoch=1&key=k", "", "box", 401},
		{"no agent id", "GET", "/agent/v1/jobs/j1/cache?epoch=1&key=k", secret, "", 401},
		{"bad token", "GET", "/agent/v1/jobs/j1/cache?epoch=1&key=k", "kat_nope", "box", 401},
		{"no epoch", "PUT", "/agent/v1/jobs/j1/cache?key=k", secret, "box", 400},
		{"a job it does not hold", "GET", "/agent/v1/jobs/j1/cache?epoch=1&key=k", secret, "box", 409},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader("body"))
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		if c.agent != "" {
			req.Header.Set("X-Kiln-Agent", c.agent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.status)
		}
	}
	job := f.job(t, push("main"))
	for _, keys := range [][]string{{""}, {"k", ""}, {strings.Repeat("k", caches.MaxKeyBytes+1)}, {"k", "a\x00b"}, {"a\tb"}} {
		if _, _, _, err := f.s.Restore(context.Background(), job, keys[0], keys[1:]); kiln.ErrorCode(err) != kiln.CodeInvalid {
			t.Errorf("restore %q: %v", keys, err)
		}
	}
}

// FuzzScopesOf (B226): any stored event, however odd, yields scopes without
// duplicates and saves only to the first of them, never for a fork.
func FuzzScopesOf(f *testing.F) {
	f.Add(`{"name":"push","branch":"main","default_branch":"main"}`)
	f.Add(`{"name":"pull_request","branch":"x","base_branch":"main","default_branch":"dev","pr":{"number":7},"fork":{"head_repository":"m/a"}}`)
	f.Add(`{"name":"tag","tag":"v1"}`)
	f.Add(`{}`)
	f.Add(`not json`)
	f.Fuzz(func(t *testing.T, ev string) {
		sc, err := caches.ScopesOf(store.JobRun{Source: "gh", Repository: "a/b", Event: []byte(ev)})
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, s := range sc.Restore {
			if s == "" || seen[s] {
				t.Fatalf("scopes %q", sc.Restore)
			}
			seen[s] = true
		}
		var e kiln.Event
		_ = json.Unmarshal([]byte(ev), &e)
		if sc.Save != "" && (len(sc.Restore) == 0 || sc.Restore[0] != sc.Save || e.Fork != nil) {
			t.Fatalf("saves to %q with scopes %q for %s", sc.Save, sc.Restore, ev)
		}
		if (sc.Save == "") == (sc.NoSave == "") {
			t.Fatalf("save %q, no save %q", sc.Save, sc.NoSave)
		}
	})
}
