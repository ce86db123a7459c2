package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
)

var (
	shaA  = strings.Repeat("a", 40)
	shaB  = strings.Repeat("b", 40)
	shaC  = strings.Repeat("c", 40)
	zeros = strings.Repeat("0", 40)
)

// apiForge is one of the two API-backed forges under test.
type apiForge struct {
	name  string
	gitea bool
	auth  string
}

var apiForges = []apiForge{{"github", false, "Bearer tok-123"}, {"gitea", true, "token tok-123"}}

func (a apiForge) source(base string) *Source {
	if a.gitea {
		return &Source{Name: "gt", Kind: kiln.SourceGitea, Gitea: &GiteaConfig{APIBase: base, Token: "tok-123", WebhookSecret: "s"}}
	}
	return &Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &GitHubConfig{APIBase: base, Token: "tok-123", WebhookSecret: "s"}}
}

// eachForge runs test against a fresh fake GitHub and a fresh fake Gitea.
func eachForge(t *testing.T, opts Options, test func(t *testing.T, f *fakeForge, repo Repo)) {
	for _, a := range apiForges {
		t.Run(a.name, func(t *testing.T) {
			f := newFakeForge(t, a.gitea, a.auth)
			repo, err := NewRepo(a.source(f.base()), opts)
			if err != nil {
				t.Fatal(err)
			}
			test(t, f, repo)
		})
	}
}

func wantCode(t *testing.T, err error, code kiln.Code) {
	t.Helper()
	if got := kiln.ErrorCode(err); got != code {
		t.Fatalf("error code = %q (%v), want %q", got, err, code)
	}
}

func TestWorkflowsAtSHA(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		f.trees[shaA] = map[string]fakeEntry{
			".kiln/workflows/ci.yml":       {typ: "file", content: []byte("on: push\n")},
			".kiln/workflows/release.yaml": {typ: "file", content: []byte(strings.Repeat("# long line of yaml\n", 200))},
			".kiln/workflows/notes.md":     {typ: "file", content: []byte("not a workflow")},
			".kiln/workflows/sub":          {typ: "dir"},
			".kiln/workflows/big.yml":      {typ: "file", content: []byte("x"), size: 2 << 20},
			".kiln/workflows/link.yml":     {typ: "symlink", content: []byte("ci.yml")},
		}
		files, err := repo.Workflows(t.Context(), fakeRepo, shaA)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, wf := range files {
			paths = append(paths, wf.Path)
		}
		want := []string{".kiln/workflows/big.yml", ".kiln/workflows/ci.yml", ".kiln/workflows/link.yml", ".kiln/workflows/release.yaml"}
		if !slices.Equal(paths, want) {
			t.Fatalf("paths = %v, want %v", paths, want)
		}
		if string(files[1].Content) != "on: push\n" || files[1].Err != nil {
			t.Errorf("ci.yml = %q, %v", files[1].Content, files[1].Err)
		}
		if len(files[3].Content) != 4000 {
			t.Errorf("release.yaml has %d bytes, want 4000 (multi-line base64 decoded)", len(files[3].Content))
		}
		wantCode(t, files[0].Err, kiln.CodeTooLarge)
		if !strings.Contains(files[0].Err.Error(), "big.yml is 2 MiB, over the 1 MiB limit") {
			t.Errorf("big.yml error = %v", files[0].Err)
		}
		if files[2].Err == nil || !strings.Contains(files[2].Err.Error(), "symbolic link") {
			t.Errorf("link.yml error = %v", files[2].Err)
		}
		for _, r := range f.seen() {
			if strings.Contains(r, "big.yml") || strings.Contains(r, "notes.md") || strings.Contains(r, "link.yml") {
				t.Errorf("fetched %s; only usable workflow files should be downloaded", r)
			}
			if !strings.Contains(r, "ref="+shaA) {
				t.Errorf("request %s is not at the event's commit", r)
			}
		}
	})
}

// Each file read is a round trip to the forge; a repository's workflow
// files are read side by side. Every file request here waits until all
// three are in flight: read one after another, they would each time out.
func TestWorkflowFilesAreReadSideBySide(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		f.trees[shaA] = map[string]fakeEntry{
			".kiln/workflows/a.yml": {typ: "file", content: []byte("on: push\n")},
			".kiln/workflows/b.yml": {typ: "file", content: []byte("on: push\n")},
			".kiln/workflows/c.yml": {typ: "file", content: []byte("on: push\n")},
		}
		var mu sync.Mutex
		inFlight, most := 0, 0
		all := make(chan struct{})
		f.setOverride(func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.HasSuffix(r.URL.Path, ".yml") {
				return false
			}
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			if inFlight == 3 {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(5 * time.Second):
			}
			mu.Lock()
			inFlight--
			mu.Unlock()
			return false
		})
		files, err := repo.Workflows(t.Context(), fakeRepo, shaA)
		if err != nil || len(files) != 3 {
			t.Fatalf("%d files, %v", len(files), err)
		}
		for _, wf := range files {
			if wf.Err != nil || string(wf.Content) != "on: push\n" {
				t.Errorf("%s: %q %v", wf.Path, wf.Content, wf.Err)
			}
		}
		if most != 3 {
			t.Fatalf("at most %d file reads were in flight at once, want 3", most)
		}
	})
}

func TestWorkflowsMissingDirectoryIsEmpty(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		files, err := repo.Workflows(t.Context(), fakeRepo, shaB)
		if err != nil || len(files) != 0 {
			t.Fatalf("Workflows = %v, %v; want empty, nil", files, err)
		}
		// A repository the token cannot see is not "no workflows".
		_, err = repo.Workflows(t.Context(), "acme/missing", shaB)
		wantCode(t, err, kiln.CodeNotFound)
	})
}

func TestWorkflowsRejectsBadArguments(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		for _, c := range []struct{ repo, sha string }{
			{"acme", shaA}, {"../x/y", shaA}, {"acme/app/x", shaA}, {fakeRepo, "main"}, {fakeRepo, "../../etc"}, {fakeRepo, "-" + shaA},
		} {
			_, err := repo.Workflows(t.Context(), c.repo, c.sha)
			wantCode(t, err, kiln.CodeInvalid)
		}
		if n := len(f.seen()); n != 0 {
			t.Errorf("%d requests sent for invalid arguments", n)
		}
	})
}

func pushEvent(before, after string) *kiln.Event {
	return &kiln.Event{Name: kiln.EventPush, Repository: fakeRepo, Ref: "refs/heads/main", Branch: "main", DefaultBranch: "main", Before: before, SHA: after}
}

func TestChangedFiles(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		f.compares[shaA+"..."+shaB] = []fakeFile{{name: "src/a.go"}, {name: "docs/new.md", prev: "docs/old.md"}, {name: "go.sum"}}
		files, ok, err := repo.ChangedFiles(t.Context(), pushEvent(shaA, shaB))
		if err != nil || !ok {
			t.Fatalf("push: ok=%v err=%v", ok, err)
		}
		slices.Sort(files)
		if want := []string{"docs/new.md", "docs/old.md", "go.sum", "src/a.go"}; !slices.Equal(files, want) {
			t.Errorf("push files = %v, want %v", files, want)
		}

		// A new branch compares against the default branch.
		f.compares["main..."+shaC] = []fakeFile{{name: "feature.go"}}
		ev := pushEvent(zeros, shaC)
		ev.Branch, ev.Ref = "feature", "refs/heads/feature"
		files, ok, err = repo.ChangedFiles(t.Context(), ev)
		if err != nil || !ok || !slices.Equal(files, []string{"feature.go"}) {
			t.Errorf("new branch: %v %v %v", files, ok, err)
		}

		// An unknown base (force push) gives no list, and no error.
		files, ok, err = repo.ChangedFiles(t.Context(), pushEvent(shaC, shaB))
		if err != nil || ok || files != nil {
			t.Errorf("unknown base: %v %v %v", files, ok, err)
		}

		// Pull request files, over several pages.
		var pr []fakeFile
		for i := range 250 {
			pr = append(pr, fakeFile{name: fmt.Sprintf("pkg/f%03d.go", i)})
		}
		f.pulls[2] = pr
		files, ok, err = repo.ChangedFiles(t.Context(), &kiln.Event{Name: kiln.EventPullRequest, Repository: fakeRepo, SHA: shaB, PR: &kiln.PR{Number: 2}})
		if err != nil || !ok || len(files) != 250 || files[249] != "pkg/f249.go" {
			t.Errorf("pull request: %d files ok=%v err=%v", len(files), ok, err)
		}
	})
}

func TestChangedFilesWithoutAPICalls(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		withList := pushEvent(shaA, shaB)
		withList.ChangedFiles, withList.ChangedFilesStatus = []string{"a", "b"}, kiln.ChangedFilesFetched
		tag := &kiln.Event{Name: kiln.EventTag, Repository: fakeRepo, Ref: "refs/tags/v1", Tag: "v1", SHA: shaB, Before: zeros}
		dispatch := &kiln.Event{Name: kiln.EventDispatch, Repository: fakeRepo, SHA: shaB}
		cases := []struct {
			name string
			ev   *kiln.Event
			want []string
			ok   bool
		}{
			{"payload list", withList, []string{"a", "b"}, true},
			{"first push of the default branch", pushEvent(zeros, shaB), nil, false},
			{"deleted branch", pushEvent(shaA, zeros), nil, false},
			{"tag", tag, nil, false},
			{"dispatch", dispatch, nil, false},
			{"nil", nil, nil, false},
		}
		for _, c := range cases {
			files, ok, err := repo.ChangedFiles(t.Context(), c.ev)
			if err != nil || ok != c.ok || !slices.Equal(files, c.want) {
				t.Errorf("%s: %v %v %v", c.name, files, ok, err)
			}
		}
		if n := len(f.seen()); n != 0 {
			t.Errorf("%d API requests, want none: %v", n, f.seen())
		}
	})
}

func manyFiles(n int) []fakeFile {
	fs := make([]fakeFile, n)
	for i := range fs {
		fs[i] = fakeFile{name: "f" + strconv.Itoa(i)}
	}
	return fs
}

func TestChangedFilesCapped(t *testing.T) {
	t.Run("github compare lists at most 300 files", func(t *testing.T) {
		f := newFakeForge(t, false, "Bearer tok-123")
		repo, _ := NewRepo(apiForges[0].source(f.base()), Options{})
		f.compares[shaA+"..."+shaB] = manyFiles(300)
		files, ok, err := repo.ChangedFiles(t.Context(), pushEvent(shaA, shaB))
		if err != nil || ok || files != nil {
			t.Errorf("300 files: %d %v %v; want incomplete", len(files), ok, err)
		}
		f.compares[shaA+"..."+shaB] = manyFiles(299)
		if files, ok, _ = repo.ChangedFiles(t.Context(), pushEvent(shaA, shaB)); !ok || len(files) != 299 {
			t.Errorf("299 files: %d %v; want complete", len(files), ok)
		}
	})
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		f.pulls[9] = manyFiles(3500)
		files, ok, err := repo.ChangedFiles(t.Context(), &kiln.Event{Name: kiln.EventPullRequest, Repository: fakeRepo, SHA: shaB, PR: &kiln.PR{Number: 9}})
		if err != nil || ok || files != nil {
			t.Errorf("3500-file pull request: %d %v %v; want incomplete", len(files), ok, err)
		}
		pages := 0
		for _, r := range f.seen() {
			if strings.Contains(r, "/pulls/9/files") {
				pages++
			}
		}
		if max := MaxChangedFiles/50 + 1; pages > max {
			t.Errorf("%d page requests, want at most %d", pages, max)
		}
	})
}

// Proves B68 (docs/behaviours.md).
func TestPostStatus(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		long := strings.Repeat("é", 200)
		err := repo.PostStatus(t.Context(), fakeRepo, shaA, Status{State: StateFailure, Context: "kiln/ci", Description: long, TargetURL: "https://kiln.example/runs/7"})
		if err != nil {
			t.Fatal(err)
		}
		got := f.posted()
		if len(got) != 1 {
			t.Fatalf("%d statuses posted", len(got))
		}
		p := got[0]
		if p.SHA != shaA || p.Body["state"] != "failure" || p.Body["context"] != "kiln/ci" || p.Body["target_url"] != "https://kiln.example/runs/7" {
			t.Errorf("posted %+v", p)
		}
		if d := []rune(p.Body["description"].(string)); len(d) != MaxDescription || d[len(d)-1] != '…' {
			t.Errorf("description has %d characters, want %d ending in an ellipsis", len(d), MaxDescription)
		}
		if p.Auth != f.token {
			t.Errorf("Authorization = %q, want %q", p.Auth, f.token)
		}
		for _, bad := range []Status{{State: "cancelled", Context: "kiln/ci"}, {State: StatePending}, {State: StatePending, Context: "c", TargetURL: "javascript:alert(1)"}} {
			wantCode(t, repo.PostStatus(t.Context(), fakeRepo, shaA, bad), kiln.CodeInvalid)
		}
		if len(f.posted()) != 1 {
			t.Error("an invalid status reached the forge")
		}
	})
}

func TestResolveAndClone(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		f.refs["main"], f.refs["v1.2"], f.refs["feature/x"] = shaA, shaB, shaC
		for ref, want := range map[string]string{"main": shaA, "refs/heads/main": shaA, "refs/tags/v1.2": shaB, "feature/x": shaC} {
			if got, err := repo.Resolve(t.Context(), fakeRepo, ref); err != nil || got != want {
				t.Errorf("Resolve(%q) = %q, %v; want %q", ref, got, err, want)
			}
		}
		if _, err := repo.Resolve(t.Context(), fakeRepo, "nope"); err == nil {
			t.Error("Resolve of an unknown ref succeeded")
		}
		_, err := repo.Resolve(t.Context(), fakeRepo, "-x")
		wantCode(t, err, kiln.CodeInvalid)

		// The source's token never goes to agents: with no clone
		// credential the clone is anonymous, with a hint naming the flag.
		ci, err := repo.Clone(t.Context(), fakeRepo)
		if err != nil {
			t.Fatal(err)
		}
		if ci.URL != f.base()+"/acme/app.git" || ci.Password != "" || ci.Username != "" || ci.SSHKey != "" ||
			!strings.Contains(ci.Hint, "--clone-token-env") {
			t.Errorf("Clone = %+v", ci)
		}
	})
}

// A token source's agents get its clone credential: a read-only token
// (as the password of the forge's user name, or the one given), or an
// ssh deploy key with its pinned host keys and the ssh address.
// Proves B100 (docs/behaviours.md).
func TestCloneCredentials(t *testing.T) {
	const key = "-----BEGIN OPENSSH PRIVATE KEY-----\nKEY\n-----END OPENSSH PRIVATE KEY-----\n"
	for _, a := range apiForges {
		t.Run(a.name, func(t *testing.T) {
			base := "https://forge.example.test"
			user := "x-access-token"
			if a.gitea {
				user = "kiln"
			}
			cases := []struct {
				clone *CloneConfig
				want  CloneInfo
			}{
				{&CloneConfig{Token: "read-1"}, CloneInfo{URL: base + "/acme/app.git", Username: user, Password: "read-1"}},
				{&CloneConfig{Token: "read-1", Username: "bot"}, CloneInfo{URL: base + "/acme/app.git", Username: "bot", Password: "read-1"}},
				{&CloneConfig{SSHKey: key, KnownHosts: "forge.example.test ssh-ed25519 AAAA"},
					CloneInfo{URL: "ssh://git@forge.example.test/acme/app.git", SSHKey: key, KnownHosts: "forge.example.test ssh-ed25519 AAAA"}},
				{&CloneConfig{SSHKey: key, SSHURL: "ssh://gitea@forge.example.test:2222"},
					CloneInfo{URL: "ssh://gitea@forge.example.test:2222/acme/app.git", SSHKey: key}},
			}
			for _, c := range cases {
				src := a.source(base)
				if a.gitea {
					src.Gitea.Clone = c.clone
				} else {
					src.GitHub.Clone, src.GitHub.WebBase = c.clone, base
				}
				repo, err := NewRepo(src, Options{})
				if err != nil {
					t.Fatal(err)
				}
				got, err := repo.Clone(t.Context(), fakeRepo)
				if err != nil || got != c.want {
					t.Errorf("%+v: Clone = %+v (%v), want %+v", c.clone, got, err, c.want)
				}
				red := src.Redacted()
				var cl *CloneConfig
				if a.gitea {
					cl = red.Gitea.Clone
				} else {
					cl = red.GitHub.Clone
				}
				if strings.Contains(fmt.Sprint(*cl), "read-1") || strings.Contains(fmt.Sprint(*cl), "KEY") {
					t.Errorf("redacted clone settings show a secret: %+v", *cl)
				}
			}
			for _, bad := range []*CloneConfig{{}, {Token: "t", SSHKey: key}, {Username: "u", SSHKey: key}, {Token: "t", KnownHosts: "x"},
				{SSHKey: "not a key"}, {SSHKey: key, SSHURL: "https://forge.example.test"}} {
				src := a.source(base)
				if a.gitea {
					src.Gitea.Clone = bad
				} else {
					src.GitHub.Clone = bad
				}
				wantCode(t, src.Validate(), kiln.CodeInvalid)
			}
		})
	}
}

func TestGitHubCloneURLs(t *testing.T) {
	for api, want := range map[string]string{
		"":                                "https://github.com/acme/app.git",
		"https://api.github.com":          "https://github.com/acme/app.git",
		"https://ghe.example.com/api/v3":  "https://ghe.example.com/acme/app.git",
		"https://ghe.example.com/api/v3/": "https://ghe.example.com/acme/app.git",
	} {
		repo, err := NewRepo(&Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &GitHubConfig{APIBase: api, Token: "t", WebhookSecret: "s"}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ci, _ := repo.Clone(t.Context(), fakeRepo)
		if ci.URL != want {
			t.Errorf("api %q: clone URL %q, want %q", api, ci.URL, want)
		}
	}
	repo, _ := NewRepo(&Source{Name: "gt", Kind: kiln.SourceGitea, Gitea: &GiteaConfig{APIBase: "https://git.example.com/api/v1/", Token: "t", WebhookSecret: "s"}}, Options{})
	if ci, _ := repo.Clone(t.Context(), fakeRepo); ci.URL != "https://git.example.com/acme/app.git" {
		t.Errorf("gitea clone URL %q", ci.URL)
	}
}

func TestAPIErrors(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	eachForge(t, Options{Now: func() time.Time { return now }, MaxResponseBytes: 1 << 20}, func(t *testing.T, f *fakeForge, repo Repo) {
		ctx := t.Context()
		call := func() error {
			_, err := repo.Workflows(ctx, fakeRepo, shaA)
			return err
		}
		respond := func(code int, hdr map[string]string, body string) {
			f.setOverride(func(w http.ResponseWriter, r *http.Request) bool {
				for k, v := range hdr {
					w.Header().Set(k, v)
				}
				w.WriteHeader(code)
				fmt.Fprint(w, body)
				return true
			})
		}

		respond(401, nil, `{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest"}`)
		err := call()
		wantCode(t, err, kiln.CodeUnauthorized)
		if !strings.Contains(err.Error(), "credentials") || !strings.Contains(err.Error(), "Bad credentials") || strings.Contains(err.Error(), "tok-123") {
			t.Errorf("401 message: %v", err)
		}
		if Retryable(err) {
			t.Error("401 is retryable")
		}

		reset := now.Add(10 * time.Minute).Unix()
		respond(403, map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.FormatInt(reset, 10)},
			`{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`)
		err = call()
		wantCode(t, err, kiln.CodeUnavailable)
		var ae *APIError
		if !errors.As(err, &ae) || ae.RetryAfter != 10*time.Minute || !Retryable(err) || !strings.Contains(err.Error(), "rate limit is exhausted; it allows requests again in 10m0s") {
			t.Errorf("rate limit: %v (%+v)", err, ae)
		}

		respond(429, map[string]string{"Retry-After": "30"}, `{"message":"You have exceeded a secondary rate limit"}`)
		err = call()
		if !errors.As(err, &ae) || ae.RetryAfter != 30*time.Second || !strings.Contains(err.Error(), "rate limit") {
			t.Errorf("secondary rate limit: %v", err)
		}

		respond(403, nil, `{"message":"Resource not accessible by integration"}`)
		err = call()
		wantCode(t, err, kiln.CodeForbidden)
		if Retryable(err) || !strings.Contains(err.Error(), "Resource not accessible by integration") {
			t.Errorf("403: %v", err)
		}

		respond(404, nil, `{"message":"Not Found"}`)
		wantCode(t, call(), kiln.CodeNotFound)

		respond(502, nil, `<html>bad gateway</html>`)
		err = call()
		wantCode(t, err, kiln.CodeUnavailable)
		if !Retryable(err) || !strings.Contains(err.Error(), "502 Bad Gateway") {
			t.Errorf("502: %v", err)
		}

		respond(200, nil, `<html>a captive portal</html>`)
		err = call()
		wantCode(t, err, kiln.CodeUnavailable)
		if !strings.Contains(err.Error(), "not the expected JSON") {
			t.Errorf("non-JSON answer: %v", err)
		}

		// A huge answer is cut off at MaxResponseBytes, not read whole.
		f.setOverride(func(w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(200)
			w.Write([]byte("["))
			chunk := []byte(strings.Repeat(`{"type":"file","name":"x.yml"},`, 1000))
			for i := 0; i < 1000 && r.Context().Err() == nil; i++ { // ~30 MB if read whole
				if _, err := w.Write(chunk); err != nil {
					break
				}
			}
			return true
		})
		err = call()
		wantCode(t, err, kiln.CodeTooLarge)
		if !strings.Contains(err.Error(), "larger than 1 MiB") {
			t.Errorf("huge answer: %v", err)
		}

		// A server that never answers is cut off by the caller's deadline.
		f.setOverride(func(w http.ResponseWriter, r *http.Request) bool {
			<-r.Context().Done()
			return true
		})
		tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err = repo.Workflows(tctx, fakeRepo, shaA)
		wantCode(t, err, kiln.CodeUnavailable)
		if !strings.Contains(err.Error(), "did not answer") || !Retryable(err) {
			t.Errorf("slow server: %v", err)
		}
	})
}

func TestAPIUnreachable(t *testing.T) {
	f := newFakeForge(t, false, "Bearer tok-123")
	base := f.base()
	f.srv.Close()
	repo, _ := NewRepo(apiForges[0].source(base), Options{})
	err := repo.PostStatus(t.Context(), fakeRepo, shaA, Status{State: StateSuccess, Context: "kiln/ci"})
	wantCode(t, err, kiln.CodeUnavailable)
	if !strings.Contains(err.Error(), "could not reach GitHub") || !Retryable(err) {
		t.Errorf("unreachable: %v", err)
	}
}

func TestWorkflowsTooManyFiles(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		tree := map[string]fakeEntry{}
		for i := range DefaultMaxWorkflowFiles + 1 {
			tree[fmt.Sprintf(".kiln/workflows/w%03d.yml", i)] = fakeEntry{typ: "file", content: []byte("on: push\n")}
		}
		f.trees[shaA] = tree
		_, err := repo.Workflows(t.Context(), fakeRepo, shaA)
		wantCode(t, err, kiln.CodeTooLarge)
		if n := len(f.seen()); n != 1 {
			t.Errorf("%d requests, want only the listing", n)
		}
	})
}
