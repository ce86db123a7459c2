package forge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
)

// forgeAnswer is what the fuzzed forge answers to every request.
type forgeAnswer struct {
	status int
	header map[string]string
	body   []byte
}

// answeringForge is one HTTP server per fuzzing process that answers every
// request with the current forgeAnswer.
type answeringForge struct {
	*httptest.Server
	mu  sync.Mutex
	cur forgeAnswer
}

func newAnsweringForge(t testing.TB) *answeringForge {
	a := &answeringForge{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		ans := a.cur
		a.mu.Unlock()
		for k, v := range ans.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(ans.status)
		_, _ = w.Write(ans.body)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *answeringForge) set(ans forgeAnswer) {
	a.mu.Lock()
	a.cur = ans
	a.mu.Unlock()
}

// The forges' API answers are a stranger's input too (a compromised or
// misbehaving GitHub Enterprise or Gitea, a proxy in between): whatever
// status, headers and body they answer — truncated JSON, the wrong shapes,
// huge numbers, base64 that is not, paths outside the workflow directory,
// endless pages — every call of a GitHub and a Gitea source ends with a
// kiln error or a result within kiln's rules, never a panic or a hang:
// workflow files only from .kiln/workflows and within the size bound,
// changed files within MaxChangedFiles, a commit id that is one.
//
// B136.
func FuzzForgeAnswers(f *testing.F) {
	dir := `[{"type":"file","name":"ci.yml","path":".kiln/workflows/ci.yml","size":20}]`
	file := `{"type":"file","name":"ci.yml","path":".kiln/workflows/ci.yml","size":20,"encoding":"base64","content":"b246IHB1c2gKam9iczoge30K"}`
	for _, seed := range []struct {
		status      uint16
		total, body string
	}{
		{200, "", dir},
		{200, "", file},
		{200, "", `[{"type":"symlink","name":"x.yml","size":1},{"type":"dir","name":"y.yml"},{"type":"file","name":"../../etc.yml","size":-1}]`},
		{200, "", `{"type":"file","encoding":"none","content":"","size":99999999}`},
		{200, "", `{"type":"file","encoding":"base64","content":"!!!not base64!!!"}`},
		{200, "", `{"files":[{"filename":"a.go","previous_filename":"b.go","status":"renamed"}]}`},
		{200, "", `{"commits":[{"files":[{"filename":"a"}]},{"files":null}]}`},
		{200, "5", `[{"filename":"a"},{"filename":"b"}]`},
		{200, "x", `[{"sha":"6113728f27ae82c7b1a177c8d03f9e96e0adf246"}]`},
		{200, "", "6113728f27ae82c7b1a177c8d03f9e96e0adf246\n"},
		{200, "", `[{"sha":"not-a-sha"}]`},
		{204, "", ""},
		{404, "", `{"message":"Not Found"}`},
		{403, "", `{"message":"API rate limit exceeded\n\u001b[31m"}`},
		{500, "", `<html>oops</html>`},
		{200, "", `[`},
		{200, "", `{"files":[` + strings.Repeat(`{"filename":"f"},`, 50) + `{}]}`},
		{302, "", ``},
	} {
		f.Add(seed.status, seed.total, []byte(seed.body))
	}
	srv := newAnsweringForge(f)
	opts := Options{HTTPClient: &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}, MaxResponseBytes: 1 << 20, MaxWorkflowBytes: 4 << 10}
	var repos []Repo
	for _, src := range []*Source{
		{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &GitHubConfig{APIBase: srv.URL, Token: "t", WebhookSecret: "s"}},
		{Name: "gt", Kind: kiln.SourceGitea, Gitea: &GiteaConfig{APIBase: srv.URL, Token: "t", WebhookSecret: "s"}},
	} {
		r, err := NewRepo(src, opts)
		if err != nil {
			f.Fatal(err)
		}
		repos = append(repos, r)
	}
	const sha = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
	push := &kiln.Event{Name: kiln.EventPush, Repository: "acme/app", SHA: sha, Before: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}
	pull := &kiln.Event{Name: kiln.EventPullRequest, Repository: "acme/app", SHA: sha, PR: &kiln.PR{Number: 7}}
	f.Fuzz(func(t *testing.T, status uint16, total string, body []byte) {
		st := int(status)
		if st < 200 || st > 599 {
			st = 200
		}
		srv.set(forgeAnswer{status: st, header: map[string]string{"X-Total-Count": total}, body: body})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, r := range repos {
			wfs, err := r.Workflows(ctx, "acme/app", sha)
			checkErr(t, "Workflows", err)
			for _, w := range wfs {
				if w.Path != WorkflowDir && !strings.HasPrefix(w.Path, WorkflowDir+"/") || strings.Contains(strings.TrimPrefix(w.Path, WorkflowDir), "/..") {
					t.Fatalf("a workflow file outside %s: %q", WorkflowDir, w.Path)
				}
				if int64(len(w.Content)) > opts.MaxWorkflowBytes {
					t.Fatalf("%s: %d bytes, over the bound", w.Path, len(w.Content))
				}
				if w.Err != nil && w.Content != nil {
					t.Fatalf("%s: an error and content", w.Path)
				}
			}
			for _, ev := range []*kiln.Event{push, pull} {
				files, complete, err := r.ChangedFiles(ctx, ev)
				checkErr(t, "ChangedFiles", err)
				if len(files) > MaxChangedFiles || !complete && len(files) > 0 && err == nil {
					t.Fatalf("changed files: %d (complete %v)", len(files), complete)
				}
			}
			if got, err := r.Resolve(ctx, "acme/app", "refs/heads/main"); err == nil && checkSHA(got) != nil {
				t.Fatalf("Resolve answered %q", got)
			} else {
				checkErr(t, "Resolve", err)
			}
			_, err = r.Collaborator(ctx, "acme/app", "someone")
			checkErr(t, "Collaborator", err)
		}
		if ctx.Err() != nil {
			t.Fatal("the calls did not end in time")
		}
	})
}

// checkErr: a forge call fails with a kiln error that has a code, and whose
// message is one line.
func checkErr(t *testing.T, call string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if kiln.ErrorCode(err) == "" {
		t.Fatalf("%s: an error without a kiln code: %v", call, err)
	}
	if strings.ContainsAny(err.Error(), "\n\r\x1b") {
		t.Fatalf("%s: the message spans lines or holds an escape: %q", call, err.Error())
	}
}
