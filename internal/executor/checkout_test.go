package executor

import (
	"encoding/base64"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/waittest"
)

// newRepo makes a repository with two commits on main and returns its
// path and the two commit ids.
func newRepo(t *testing.T) (dir, first, second string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "repo")
	git(t, "", "init", "-q", "-b", "main", dir)
	writeFile(t, filepath.Join(dir, "a.txt"), "one\n")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-q", "-m", "first")
	first = git(t, dir, "rev-parse", "HEAD")
	writeFile(t, filepath.Join(dir, "a.txt"), "two\n")
	git(t, dir, "commit", "-q", "-am", "second")
	second = git(t, dir, "rev-parse", "HEAD")
	return dir, first, second
}

func TestCheckoutCommitOverFileURL(t *testing.T) {
	t.Parallel()
	repo, first, second := newRepo(t)
	chownToNobody(t, repo)
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j",
		Checkout: &Checkout{URL: "file://" + repo, Ref: "refs/heads/main", SHA: first},
		Steps:    []Step{{Run: "cat a.txt; git rev-parse HEAD; git rev-list --count HEAD"}},
	})
	wantStatuses(t, res, success, success)
	if res.Steps[0].Index != CheckoutIndex || res.Steps[0].Name != "checkout" {
		t.Errorf("checkout step = %+v", res.Steps[0])
	}
	if got, want := rec.text(0), "one\n"+first+"\n1\n"; got != want {
		t.Errorf("step saw %q, want %q", got, want)
	}
	checkoutLog := rec.text(CheckoutIndex)
	if !strings.Contains(checkoutLog, "[kiln] HEAD is now "+first) {
		t.Errorf("checkout log = %q", checkoutLog)
	}

	// A ref alone checks out its tip.
	res, rec = runJob(t, x, &Job{JobID: "j",
		Checkout: &Checkout{URL: "file://" + repo, Ref: "main"},
		Steps:    []Step{{Run: "git rev-parse HEAD"}},
	})
	wantStatuses(t, res, success, success)
	if got := rec.text(0); got != second+"\n" {
		t.Errorf("ref checkout at %q", got)
	}
}

func TestCheckoutOfMissingCommitFails(t *testing.T) {
	t.Parallel()
	repo, _, _ := newRepo(t)
	x := newExecutor(t)
	res, _ := runJob(t, x, &Job{JobID: "j",
		Checkout: &Checkout{URL: "file://" + repo, SHA: strings.Repeat("ab", 20)},
		Steps:    []Step{{Run: "echo no"}, {If: "always()", Run: "echo cleanup"}},
	})
	wantStatuses(t, res, failed, skipped, success)
	if res.Status != kiln.JobFailed || !strings.HasPrefix(res.Error, "checkout failed: git fetch failed") {
		t.Errorf("job = %s %q", res.Status, res.Error)
	}
}

func TestNoCheckout(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{{Run: "ls -A | wc -l"}}})
	wantStatuses(t, res, success)
	if strings.TrimSpace(rec.text(0)) != "0" {
		t.Errorf("workspace not empty: %q", rec.text(0))
	}
}

func TestCheckoutDirtyWorkingTree(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "tree")
	git(t, "", "init", "-q", "-b", "main", repo)
	for name, content := range map[string]string{
		"keep.txt": "committed\n", "modified.txt": "old\n", "deleted.txt": "bye\n",
		"staged-deleted.txt": "gone\n", ".gitignore": "*.log\nbuild/\n", "dir/nested.txt": "n\n",
		"link-target.txt": "target\n",
	} {
		writeFile(t, filepath.Join(repo, name), content)
	}
	if err := os.Symlink("link-target.txt", filepath.Join(repo, "link")); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "base")
	head := git(t, repo, "rev-parse", "HEAD")

	writeFile(t, filepath.Join(repo, "modified.txt"), "new\n")
	os.Remove(filepath.Join(repo, "deleted.txt"))
	git(t, repo, "rm", "-q", "staged-deleted.txt")
	writeFile(t, filepath.Join(repo, "staged-new.txt"), "staged\n")
	git(t, repo, "add", "staged-new.txt")
	writeFile(t, filepath.Join(repo, "untracked.txt"), "untracked\n")
	writeFile(t, filepath.Join(repo, "newdir", "deep", "file.txt"), "deep\n")
	writeFile(t, filepath.Join(repo, "ignored.log"), "ignored\n")
	writeFile(t, filepath.Join(repo, "build", "out.bin"), "ignored\n")
	if err := os.Chmod(filepath.Join(repo, "untracked.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(repo, "dir"))
	os.Remove(filepath.Join(repo, "link"))
	if err := os.Symlink("keep.txt", filepath.Join(repo, "link")); err != nil {
		t.Fatal(err)
	}
	chownToNobody(t, repo)

	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", KeepWorkspace: true,
		Checkout: &Checkout{LocalPath: filepath.Join(repo, "newdir")},
		Steps:    []Step{{Run: "git rev-parse HEAD"}},
	})
	wantStatuses(t, res, success, success)
	t.Cleanup(func() { removeTree(filepath.Dir(res.Workspace)) })
	if got := strings.TrimSpace(rec.text(0)); got != head {
		t.Errorf("workspace HEAD = %q, want %q", got, head)
	}
	ws := res.Workspace
	want := map[string]string{
		"keep.txt": "committed\n", "modified.txt": "new\n", "staged-new.txt": "staged\n",
		"untracked.txt": "untracked\n", "newdir/deep/file.txt": "deep\n", ".gitignore": "*.log\nbuild/\n",
	}
	for name, content := range want {
		b, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil || string(b) != content {
			t.Errorf("%s = %q, %v; want %q", name, b, err, content)
		}
	}
	for _, absent := range []string{"deleted.txt", "staged-deleted.txt", "ignored.log", "build", "dir/nested.txt", "dir"} {
		if _, err := os.Lstat(filepath.Join(ws, absent)); !os.IsNotExist(err) {
			t.Errorf("%s should be absent (%v)", absent, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(ws, "untracked.txt")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode not kept: %v %v", fi.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(ws, "link")); err != nil || target != "keep.txt" {
		t.Errorf("link -> %q, %v", target, err)
	}
	// The source tree is untouched (no index refresh, no lock files).
	if _, err := os.Stat(filepath.Join(repo, ".git", "index.lock")); !os.IsNotExist(err) {
		t.Errorf("index.lock left in the source: %v", err)
	}
}

// chownToNobody gives a repository to another user, as when the agent runs
// as a different user than the owner of the tree: git then needs
// safe.directory. Only root can do it; others test without.
func chownToNobody(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	if out, err := exec.Command("chown", "-R", "65534:65534", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
}

func TestCheckoutWorkingTreeWithoutCommits(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "fresh")
	git(t, "", "init", "-q", repo)
	writeFile(t, filepath.Join(repo, "hello.txt"), "hi\n")
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j",
		Checkout: &Checkout{LocalPath: repo},
		Steps:    []Step{{Run: "cat hello.txt"}},
	})
	wantStatuses(t, res, success, success)
	if rec.text(0) != "hi\n" {
		t.Errorf("log = %q", rec.text(0))
	}
}

// gitServer serves repositories under root over smart HTTP with
// git-http-backend, requiring Basic credentials user:token.
type gitServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string // URL and headers of each request, except the valid credential
	block    chan struct{}
	down     int // the next this many requests are answered 503
}

func newGitServer(t *testing.T, root, user, token string) *gitServer {
	t.Helper()
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	h := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Root: "/git",
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"},
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+token))
	s := &gitServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.URL.String())
		block := s.block
		down := s.down > 0
		if down {
			s.down--
		}
		s.mu.Unlock()
		if down {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		if block != nil {
			select {
			case <-block:
			case <-r.Context().Done():
			}
			return
		}
		if r.Header.Get("Authorization") != want {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestCheckoutOverHTTPWithToken(t *testing.T) {
	t.Parallel()
	repo, first, _ := newRepo(t)
	const token = "ghs_Secr3tT0kenValue"
	srv := newGitServer(t, filepath.Dir(repo), "kiln-bot", token)

	// A git that records its arguments, to prove the token is never one.
	dir := t.TempDir()
	argvLog := filepath.Join(dir, "argv.log")
	wrapper := filepath.Join(dir, "git-wrapper")
	writeFile(t, wrapper, "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '"+argvLog+"'\nexec git \"$@\"\n")
	os.Chmod(wrapper, 0o755)
	x := newExecutor(t, func(c *Config) { c.GitPath = wrapper })

	url := srv.URL + "/git/repo/.git"
	res, rec := runJob(t, x, &Job{JobID: "j", KeepWorkspace: true,
		Checkout: &Checkout{URL: url, SHA: first, Auth: &GitAuth{Username: "kiln-bot", Password: token}},
		Steps:    []Step{{Run: "cat a.txt; env | grep -c GIT_CONFIG || true"}},
	})
	wantStatuses(t, res, success, success)
	t.Cleanup(func() { removeTree(filepath.Dir(res.Workspace)) })
	if rec.text(0) != "one\n0\n" {
		t.Errorf("step log = %q", rec.text(0))
	}
	argv, _ := os.ReadFile(argvLog)
	if !strings.Contains(string(argv), "fetch") || strings.Contains(string(argv), token) {
		t.Errorf("git argv:\n%s", argv)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte("kiln-bot:" + token))
	gitConfig, _ := os.ReadFile(filepath.Join(res.Workspace, ".git", "config"))
	for _, leak := range []string{token, b64} {
		if strings.Contains(rec.allText(), leak) || strings.Contains(string(gitConfig), leak) {
			t.Errorf("%q leaked into the log or .git/config", leak)
		}
	}
	srv.mu.Lock()
	for _, r := range srv.requests {
		if strings.Contains(r, token) {
			t.Errorf("token in request URL %q", r)
		}
	}
	srv.mu.Unlock()

	// A token embedded in the URL is moved out of it.
	res, rec = runJob(t, x, &Job{JobID: "j",
		Checkout: &Checkout{URL: strings.Replace(url, "://", "://kiln-bot:"+token+"@", 1), SHA: first},
		Steps:    []Step{{Run: "git remote get-url origin"}},
	})
	wantStatuses(t, res, success, success)
	if strings.Contains(rec.allText(), token) || strings.Contains(string(must(os.ReadFile(argvLog))), token) {
		t.Error("a URL-embedded token leaked")
	}

	// Without credentials the server refuses, and git does not prompt; the
	// server's hint on how to give kiln credentials follows the error.
	const hint = "source gh has no clone credential; kiln sources update gh --clone-token-env VAR"
	res, rec = runJob(t, x, &Job{JobID: "j", Checkout: &Checkout{URL: url, SHA: first, Hint: hint}, Steps: []Step{{Run: "true"}}})
	wantStatuses(t, res, failed, skipped)
	if !strings.Contains(res.Error, hint) || !strings.Contains(rec.text(CheckoutIndex), hint) {
		t.Errorf("a failed anonymous checkout does not say how to fix it: %q\n%s", res.Error, rec.text(CheckoutIndex))
	}
}

// B274: a fetch that fails for a reason that may pass (the server down,
// answering 503) is tried again with a growing wait, saying why, and
// succeeds once the server is back; a server that cannot be reached at
// all fails the checkout with that cause, named, after the last attempt —
// not with a fallback to fetching the branch.
func TestCheckoutRetriesTransientFailuresAndNamesTheCause(t *testing.T) {
	t.Parallel()
	repo, first, _ := newRepo(t)
	srv := newGitServer(t, filepath.Dir(repo), "kiln-bot", "tok")
	srv.mu.Lock()
	srv.down = 2
	srv.mu.Unlock()
	x := newExecutor(t)
	auth := &GitAuth{Username: "kiln-bot", Password: "tok"}
	res, rec := runJob(t, x, &Job{JobID: "j", Checkout: &Checkout{URL: srv.URL + "/git/repo/.git", SHA: first, Ref: "refs/heads/main", Auth: auth},
		Steps: []Step{{Run: "cat a.txt"}}})
	wantStatuses(t, res, success, success)
	log := rec.text(CheckoutIndex)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, want := range []string{host + " answered HTTP 503; trying again in 1s (attempt 2 of 4)", "trying again in 2s (attempt 3 of 4)"} {
		if !strings.Contains(log, want) {
			t.Errorf("checkout log lacks %q:\n%s", want, log)
		}
	}

	// Nothing listens on this port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	res, rec = runJob(t, x, &Job{JobID: "j", Checkout: &Checkout{URL: "http://" + dead + "/acme/app.git", SHA: first, Ref: "refs/heads/main"},
		Steps: []Step{{Run: "true"}}})
	wantStatuses(t, res, failed, skipped)
	if want := "could not connect to "; !strings.Contains(res.Error, want) || !strings.Contains(res.Error, strings.Split(dead, ":")[1]) {
		t.Errorf("error %q does not name the unreachable server", res.Error)
	}
	t.Logf("the job's error: %s", res.Error)
	log = rec.text(CheckoutIndex)
	if strings.Contains(log, "did not serve the commit by id") || strings.Count(log, "trying again in") != 3 {
		t.Errorf("checkout log:\n%s", log)
	}
}

func TestCancelDuringCheckout(t *testing.T) {
	t.Parallel()
	repo, first, _ := newRepo(t)
	srv := newGitServer(t, filepath.Dir(repo), "u", "p")
	srv.block = make(chan struct{})
	t.Cleanup(func() { close(srv.block) })
	x := newExecutor(t)
	rec := &recorder{}
	e := x.Start(t.Context(), &Job{JobID: "j",
		Checkout: &Checkout{URL: srv.URL + "/git/repo/.git", SHA: first, Auth: &GitAuth{Password: "p"}},
		Steps:    []Step{{Run: "true"}, {If: "cancelled()", Run: "echo after cancel"}},
	}, rec)
	waittest.Until(t, 10*time.Second, "git to reach the server", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return len(srv.requests) > 0
	})
	e.Cancel(false)
	res := e.Wait()
	wantStatuses(t, res, cancelled, skipped, success)
	if res.Status != kiln.JobCancelled {
		t.Errorf("job = %s", res.Status)
	}
}

func TestCheckoutOverSSH(t *testing.T) {
	t.Parallel()
	repo, first, _ := newRepo(t)
	dir := t.TempDir()
	sshLog := filepath.Join(dir, "ssh.log")
	bin := filepath.Join(dir, "bin")
	// A stand-in ssh: it records its arguments and the key file it was
	// given, then runs the remote command locally, as sshd would.
	writeFile(t, filepath.Join(bin, "ssh"), `#!/bin/sh
log='`+sshLog+`'
for a in "$@"; do printf 'arg %s\n' "$a" >> "$log"; done
while [ $# -gt 1 ]; do
  case "$1" in
    -i) stat -c 'keymode %a' "$2" >> "$log"; cat "$2" >> "$log"; shift 2;;
    -o) case "$2" in UserKnownHostsFile=*) cat "${2#UserKnownHostsFile=}" >> "$log";; esac; shift 2;;
    *) shift;;
  esac
done
exec sh -c "$1"
`)
	os.Chmod(filepath.Join(bin, "ssh"), 0o755)
	x := newExecutor(t, func(c *Config) {
		c.BaseEnv = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + dir, raceEnv}
	})
	const key = "-----BEGIN OPENSSH PRIVATE KEY-----\nFAKEKEYMATERIAL0123456789\n-----END OPENSSH PRIVATE KEY-----"
	res, rec := runJob(t, x, &Job{JobID: "j",
		Checkout: &Checkout{URL: "ssh://git@example.invalid" + repo, SHA: first,
			Auth: &GitAuth{SSHKey: []byte(key), KnownHosts: []byte("example.invalid ssh-ed25519 AAAATEST\n")}},
		Steps: []Step{{Run: "cat a.txt; ls \"$KILN_WORKSPACE/../meta\""}},
	})
	wantStatuses(t, res, success, success)
	if !strings.HasPrefix(rec.text(0), "one\n") || strings.Contains(rec.text(0), "ssh-key") {
		t.Errorf("step log = %q (the key file must be gone)", rec.text(0))
	}
	log := string(must(os.ReadFile(sshLog)))
	for _, want := range []string{"keymode 600", "FAKEKEYMATERIAL0123456789", "arg IdentitiesOnly=yes", "arg StrictHostKeyChecking=yes", "example.invalid ssh-ed25519 AAAATEST", "arg git@example.invalid"} {
		if !strings.Contains(log, want) {
			t.Errorf("ssh log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(rec.allText(), "FAKEKEYMATERIAL") {
		t.Error("the key leaked into the log")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
