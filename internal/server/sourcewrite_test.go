package server

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/forge/forgetest"
	"github.com/kilnci/kiln/internal/jobspec"
)

// Dispatch keeps a source's configuration instead of reading its row for
// every job, yet a source changed through the API reaches the very next
// job the server sends, without waiting for the cache to age: a rotated
// clone token is the one sent, a removed one is sent no more, and a
// removed source fails the dispatch.
// Proves B282 (docs/behaviours.md).
func TestSourceWrittenThroughTheAPIReachesTheNextCheckout(t *testing.T) {
	gh := forgetest.NewGitHub(t)
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.LocalAgents = t.TempDir(), "127.0.0.1:0", 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var failed error
	err := Run(ctx, cfg, Options{Out: io.Discard, Ready: func(s *Server) {
		defer cancel()
		failed = checkoutsAcrossSourceWrites(ctx, s, gh.URL)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if failed != nil {
		t.Fatal(failed)
	}
}

func checkoutsAcrossSourceWrites(ctx context.Context, s *Server, apiBase string) error {
	c, err := api.NewClient(s.URL, s.AdminToken)
	if err != nil {
		return err
	}
	created, err := c.AddSource(ctx, forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: apiBase, Token: "pat-1", WebhookSecret: "s", Clone: &forge.CloneConfig{Token: "read-1"}}})
	if err != nil {
		return err
	}
	creds := sourceCredentials{s.Sources}
	job := jobspec.Checkout{Source: created.ID, Repository: "acme/app", URL: "https://event.example.test/acme/app.git", Ref: "refs/heads/main", SHA: "abc"}
	password := func() (string, error) {
		co, err := creds.Checkout(ctx, job)
		if err != nil {
			return "", err
		}
		if co.Auth == nil {
			return "", nil
		}
		return co.Auth.Password, nil
	}
	steps := []struct {
		what   string
		change func() error
		want   string
	}{
		{"the first job", func() error { return nil }, "read-1"},
		{"a job after nothing changed", func() error { return nil }, "read-1"},
		{"the next job after the clone token was rotated", func() error {
			_, err := c.UpdateSource(ctx, "gh", map[string]any{"github": map[string]any{"clone": map[string]any{"token": "read-2"}}})
			return err
		}, "read-2"},
		{"the next job after the clone token was removed", func() error {
			_, err := c.UpdateSource(ctx, "gh", map[string]any{"github": map[string]any{"clone": nil}})
			return err
		}, ""},
	}
	for _, st := range steps {
		if err := st.change(); err != nil {
			return fmt.Errorf("before %s: %w", st.what, err)
		}
		if got, err := password(); err != nil || got != st.want {
			return fmt.Errorf("%s was sent clone password %q (%v), want %q", st.what, got, err, st.want)
		}
	}
	if err := c.RemoveSource(ctx, "gh"); err != nil {
		return err
	}
	if _, err := creds.Checkout(ctx, job); kiln.ErrorCode(err) != kiln.CodeNotFound {
		return fmt.Errorf("the next job after the source was removed: %v, want its source not found", err)
	}
	return nil
}
