package forge

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// Adding a source warns when its only token can push or kiln cannot tell:
// GitHub lists a classic token's scopes in X-OAuth-Scopes (repo and
// public_repo can push), and says nothing of a fine-grained token's
// permissions or a Gitea token's. A clone token that can push is worth a
// warning too; a read-only clone credential, a deploy key or a GitHub App
// is not.
// Proves B100 (docs/behaviours.md).
func TestCredentialWarnings(t *testing.T) {
	scopes := func(s string) *string { return &s }
	gh := newFakeForge(t, false, "Bearer tok-123")
	src := apiForges[0].source(gh.base())
	cases := []struct {
		scopes *string
		want   string // "" for no warning
	}{
		{scopes("repo, read:org"), "the token can push (a classic token with scope repo)"},
		{scopes("public_repo"), "the token can push (a classic token with scope public_repo)"},
		{scopes("read:org, workflow"), ""},
		{scopes(""), ""},
		{nil, "cannot tell whether the token can push (GitHub does not list a fine-grained token's permissions)"},
	}
	for _, c := range cases {
		gh.mu.Lock()
		gh.scopes = c.scopes
		gh.mu.Unlock()
		got := CredentialWarnings(t.Context(), src, Options{})
		if c.want == "" && len(got) != 0 || c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want) || !strings.Contains(got[0], "--clone-token-env")) {
			t.Errorf("scopes %v: warnings %q, want %q", c.scopes, got, c.want)
		}
	}

	// The token GitHub refuses: kiln says it could not ask.
	bad := apiForges[0].source(gh.base())
	bad.GitHub.Token = "wrong"
	if got := CredentialWarnings(t.Context(), bad, Options{}); len(got) != 1 || !strings.Contains(got[0], "could not ask GitHub") {
		t.Errorf("refused token: %q", got)
	}

	// A clone token is checked instead of the source's own.
	withClone := apiForges[0].source(gh.base())
	withClone.GitHub.Clone = &CloneConfig{Token: "tok-123"}
	gh.mu.Lock()
	gh.scopes = scopes("repo")
	gh.mu.Unlock()
	if got := CredentialWarnings(t.Context(), withClone, Options{}); len(got) != 1 || !strings.Contains(got[0], "the clone token can push") {
		t.Errorf("writing clone token: %q", got)
	}
	gh.mu.Lock()
	gh.scopes = nil
	gh.mu.Unlock()
	if got := CredentialWarnings(t.Context(), withClone, Options{}); len(got) != 0 {
		t.Errorf("fine-grained clone token: %q", got)
	}

	gt := apiForges[1].source("https://gitea.example.test")
	if got := CredentialWarnings(t.Context(), gt, Options{}); len(got) != 1 || !strings.Contains(got[0], "cannot tell whether the Gitea token can push") {
		t.Errorf("gitea: %q", got)
	}
	gt.Gitea.Clone = &CloneConfig{Token: "read"}
	if got := CredentialWarnings(t.Context(), gt, Options{}); len(got) != 0 {
		t.Errorf("gitea with a clone token: %q", got)
	}
}

// Whether a fork's author may push to the base repository is asked of the
// forge: Gitea (whose payloads do not say) answers its collaborators API
// with 204 or 404, and the repository's owner needs no question; a
// failure is an error, never a yes.
// Proves B99 (docs/behaviours.md).
func TestCollaborator(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		f.mu.Lock()
		f.collaborators = map[string]int{"carol": http.StatusNoContent, "mallory": http.StatusNotFound, "flaky": http.StatusInternalServerError}
		f.mu.Unlock()
		for user, want := range map[string]bool{"carol": true, "mallory": false, "nobody": false} {
			if got, err := repo.Collaborator(t.Context(), fakeRepo, user); err != nil || got != want {
				t.Errorf("%s: %v %v, want %v", user, got, err, want)
			}
		}
		if got, err := repo.Collaborator(t.Context(), fakeRepo, "flaky"); err == nil || got {
			t.Errorf("a 500 answered %v %v", got, err)
		}
		if _, err := repo.Collaborator(t.Context(), fakeRepo, "../admin"); kiln.ErrorCode(err) != kiln.CodeInvalid {
			t.Errorf("a user name with a slash: %v", err)
		}
		if f.gitea {
			count := func() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.requests) }
			before := count()
			if got, err := repo.Collaborator(t.Context(), fakeRepo, "acme"); err != nil || !got {
				t.Errorf("the owner: %v %v", got, err)
			}
			if count() != before {
				t.Error("kiln asked Gitea whether the repository's owner may push")
			}
		}
	})
	for _, src := range []*Source{
		{Name: "l", Kind: kiln.SourceLocal, Local: &LocalConfig{Path: t.TempDir()}},
	} {
		repo, err := NewRepo(src, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := repo.Collaborator(t.Context(), "a/b", "x"); err == nil || got {
			t.Errorf("%s: %v %v", src.Kind, got, err)
		}
	}
}
