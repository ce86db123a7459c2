package bench

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/forge"
)

// The repository the bench's workflows live in, on the bench's own
// GitHub API (github.go).
const (
	benchRepo     = "kiln-bench/app"
	benchSource   = "bench"
	benchSecret   = "kiln-bench-webhook-secret"
	benchAPIToken = "ghp_kilnbench"
	benchMainSHA  = "0000000000000000000000000000000000000001"
)

// The bench's workflows: a push runs one no-op job; dispatches run 256 of
// them (a 16 × 16 matrix), on agents labelled bench or, for the backlog,
// on a label no agent has.
var benchWorkflows = map[string]string{
	".kiln/workflows/push.yml": `name: push
on: push
jobs:
  noop:
    runs_on: [bench]
    steps:
      - run: "true"
`,
	".kiln/workflows/noop.yml":    matrixWorkflow("noop", "bench"),
	".kiln/workflows/backlog.yml": matrixWorkflow("backlog", "gpu-nobody-has"),
}

func matrixWorkflow(name, label string) string {
	return fmt.Sprintf(`name: %s
on: dispatch
jobs:
  noop:
    runs_on: [%s]
    matrix:
      a: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
      b: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    steps:
      - run: "true"
`, name, label)
}

// stage is a server with a GitHub API holding the bench's workflows, its
// source, and an agent token.
type stage struct {
	*serverProc
	gh    *benchGitHub
	token string
}

// stop ends the server and the GitHub API.
func (st *stage) stop() {
	st.serverProc.stop()
	st.gh.Close()
}

// startStage starts a stage; the repository holds files when given, else
// the bench's workflows.
func (b *bench) startStage(ctx context.Context, files map[string]string) (*stage, error) {
	s, err := b.startServer(ctx, serverOptions{})
	if err != nil {
		return nil, err
	}
	if files == nil {
		files = benchWorkflows
	}
	gh, err := newBenchGitHub(files)
	if err != nil {
		s.stop()
		return nil, err
	}
	st := &stage{serverProc: s, gh: gh}
	if st.token, err = setUpSource(ctx, s, gh.URL); err != nil {
		st.stop()
		return nil, err
	}
	return st, nil
}

// commitSHA is the id of the bench repository's n-th commit; every commit
// holds the same files.
func commitSHA(n int) string { return fmt.Sprintf("%040x", n+2) }

// setUpSource adds a GitHub source at apiBase to s and creates an agent
// token.
func setUpSource(ctx context.Context, s *serverProc, apiBase string) (token string, err error) {
	_, err = s.client.AddSource(ctx, forge.Source{Name: benchSource, Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: apiBase, WebBase: apiBase, Token: benchAPIToken, WebhookSecret: benchSecret,
	}})
	if err != nil {
		return "", fmt.Errorf("add the bench source: %w", err)
	}
	tk, err := s.client.CreateToken(ctx, api.CreateTokenRequest{Name: "bench"})
	if err != nil {
		return "", fmt.Errorf("create an agent token: %w", err)
	}
	return tk.Secret, nil
}

// pushPayload is a GitHub push delivery of sha to main.
func pushPayload(sha string) []byte {
	p := map[string]any{
		"ref": "refs/heads/main", "before": benchMainSHA, "after": sha, "created": false, "deleted": false,
		"repository": map[string]any{"full_name": benchRepo, "clone_url": "https://github.invalid/" + benchRepo + ".git",
			"default_branch": "main"},
		"head_commit": map[string]any{"id": sha, "message": "bench", "added": []string{}, "removed": []string{},
			"modified": []string{"main.go"}},
		"commits": []any{map[string]any{"id": sha, "message": "bench", "modified": []string{"main.go"}}},
		"pusher":  map[string]any{"name": "bench"}, "sender": map[string]any{"login": "bench"},
	}
	b, _ := json.Marshal(p)
	return b
}

// deliver posts a signed push delivery the way GitHub does and returns
// when the server answered 202.
func deliver(ctx context.Context, hc *http.Client, s *serverProc, delivery string, body []byte) error {
	mac := hmac.New(sha256.New, []byte(benchSecret))
	mac.Write(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/webhook/github/"+benchSource, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/kiln-bench")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("webhook answered %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// dispatchRuns starts n runs of workflow through the API, eight requests
// at a time, and waits until every one is created.
func dispatchRuns(ctx context.Context, s *serverProc, workflow string, n int) error {
	sem := make(chan struct{}, 8)
	errs := make(chan error, n)
	for range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			d, err := s.client.Dispatch(ctx, api.DispatchRequest{Source: benchSource, Repository: benchRepo, Ref: "main", Workflow: workflow}, true)
			if err == nil && len(d.RunIDs) == 0 {
				err = fmt.Errorf("dispatch of %s created no run: %s %s", workflow, d.Status, d.Message)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

var webhookClient = &http.Client{Timeout: 30 * time.Second}
