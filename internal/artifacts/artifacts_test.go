package artifacts_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/artifacts"
	"github.com/kilnci/kiln/internal/storage/fs"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

func service(t *testing.T, db *store.DB, maxBytes int64) (*artifacts.Service, *fs.Backend) {
	t.Helper()
	be, err := fs.Open(fs.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := artifacts.New(db, be, artifacts.Config{MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	return s, be
}

// B206: an artifact over artifacts.max_bytes is refused with an error
// naming the key, and nothing of it is kept or listed.
func TestAnArtifactOverTheCapIsRefusedAndNothingKept(t *testing.T) {
	db := storetest.New(t)
	s, be := service(t, db, 1000)
	ctx := context.Background()
	_, err := s.Store(ctx, "run1", "job1", "big", bytes.NewReader(make([]byte, 1001)))
	if kiln.ErrorCode(err) != kiln.CodeTooLarge || !strings.Contains(kiln.ErrorMessage(err), "artifacts.max_bytes (1000 bytes)") {
		t.Fatalf("over the cap: %v", err)
	}
	if owner, _ := db.Artifacts().Owner(ctx, "run1", "big"); owner != "" {
		t.Fatalf("the refused artifact was recorded for %s", owner)
	}
	if objs, _, _ := be.List(ctx, "artifacts/", "", 10); len(objs) != 0 {
		t.Fatalf("the refused artifact's body was kept: %+v", objs)
	}
	if _, err := s.Store(ctx, "run1", "job1", "small", bytes.NewReader(make([]byte, 1000))); err != nil {
		t.Fatalf("at the cap: %v", err)
	}
}

// B207: an artifact name is unique in a run: another job's upload of a
// taken name is a conflict and leaves the first one's body as it was; the
// same job may upload it again (a retried attempt).
func TestAnArtifactNameIsUniqueInARun(t *testing.T) {
	db := storetest.New(t)
	s, _ := service(t, db, 0)
	ctx := context.Background()
	if _, err := s.Store(ctx, "run1", "job1", "dist", strings.NewReader("first")); err != nil {
		t.Fatal(err)
	}
	_, err := s.Store(ctx, "run1", "job2", "dist", strings.NewReader("second"))
	if kiln.ErrorCode(err) != kiln.CodeConflict || !strings.Contains(kiln.ErrorMessage(err), "matrix values") {
		t.Fatalf("another job's upload of the name: %v", err)
	}
	if _, err := s.Store(ctx, "run1", "job1", "dist", strings.NewReader("again")); err != nil {
		t.Fatalf("the same job again: %v", err)
	}
	if _, err := s.Store(ctx, "run2", "job3", "dist", strings.NewReader("other run")); err != nil {
		t.Fatalf("another run: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b", `a\b`, "tab\there", strings.Repeat("x", 256)} {
		if _, err := s.Store(ctx, "run1", "job1", bad, strings.NewReader("x")); kiln.ErrorCode(err) != kiln.CodeInvalid {
			t.Errorf("name %q: %v", bad, err)
		}
	}
}

// B208: the agents' routes serve only an agent holding the job under its
// lease epoch, with a token it registered with.
func TestAgentRoutesRefuseStrangers(t *testing.T) {
	db := storetest.New(t)
	s, _ := service(t, db, 0)
	srv := httptest.NewServer(s.AgentHandler())
	defer srv.Close()
	_, secret, err := db.Auth().CreateAgentToken(context.Background(), store.AgentTokenSpec{Name: "box"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path, token, agent string
		status                           int
	}{
		{"no token", "PUT", "/agent/v1/jobs/j1/artifacts/a?epoch=1", "", "box", 401},
		{"no agent id", "PUT", "/agent/v1/jobs/j1/artifacts/a?epoch=1", secret, "", 401},
		{"bad token", "GET", "/agent/v1/jobs/j1/needs/artifacts?epoch=1", "kat_nope", "box", 401},
		{"no epoch", "GET", "/agent/v1/jobs/j1/artifacts/a", secret, "box", 400},
		{"a job it does not hold", "GET", "/agent/v1/jobs/j1/artifacts/a?epoch=1", secret, "box", 409},
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
}
