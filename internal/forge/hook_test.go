package forge

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// fakeKiln writes an executable named kiln into dir that appends its
// arguments (one per line, then a separator) and $KILN_SERVER to log.
func fakeKiln(t *testing.T, dir, log string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "kiln")
	script := "#!/bin/sh\n{ printf 'arg:%s\\n' \"$@\"; printf 'server:%s\\n' \"$KILN_SERVER\"; echo --; } >> " + shellQuote(log) + "\n" +
		"case \"$4\" in refs/heads/fail) exit 3 ;; esac\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// Proves B5 (docs/behaviours.md).
func TestPostReceiveHookRunByGitPush(t *testing.T) {
	bare := newTestGit(t, true)
	src := localSource(bare.dir)
	tmp := t.TempDir()
	log := filepath.Join(tmp, "calls.log")
	// A directory with a space and a quote, to prove the quoting.
	kilnDir := filepath.Join(tmp, "it's a dir")
	kiln := fakeKiln(t, kilnDir, log)
	server := `https://kiln.example.com/ "quoted" $HOME 'single'`
	hook, err := InstallHook(t.Context(), src, HookConfig{Kiln: kiln, Env: []EnvVar{{"KILN_SERVER", server}}}, false, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if hook != filepath.Join(bare.dir, "hooks", "post-receive") {
		t.Errorf("hook at %s", hook)
	}
	if fi, err := os.Stat(hook); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("hook mode: %v %v", fi.Mode(), err)
	}

	work := newTestGit(t, false)
	c1 := work.commit("one", map[string]string{"a": "1"})
	work.git("tag", "v1")
	work.git("branch", "doomed")
	work.git("branch", "fail")
	out := pushWithOutput(t, work, "push", bare.dir, "main", "v1", "doomed", "fail")
	if !strings.Contains(out, "kiln: could not trigger source app for refs/heads/fail; the push itself succeeded") {
		t.Errorf("push output lacks the failure notice:\n%s", out)
	}
	c2 := work.commit("two", map[string]string{"b": "2"})
	work.git("push", "-q", bare.dir, "main", ":doomed") // an update and a deletion

	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	calls := strings.Split(strings.TrimSuffix(string(got), "--\n"), "--\n")
	var want []string
	call := func(ref, sha, before string) string {
		return "arg:trigger\narg:app\narg:--ref\narg:" + ref + "\narg:--sha\narg:" + sha + "\narg:--before\narg:" + before + "\nserver:" + server + "\n"
	}
	want = append(want,
		call("refs/heads/main", c1, zeros), call("refs/tags/v1", c1, zeros),
		call("refs/heads/doomed", c1, zeros), call("refs/heads/fail", c1, zeros),
		call("refs/heads/main", c2, c1))
	if len(calls) != len(want) {
		t.Fatalf("%d calls, want %d:\n%s", len(calls), len(want), got)
	}
	// git feeds the hook one line per ref in an order of its own: compare as sets.
	for _, w := range want {
		found := false
		for _, c := range calls {
			found = found || c == w
		}
		if !found {
			t.Errorf("no call\n%s\namong\n%s", w, got)
		}
	}
}

func pushWithOutput(t *testing.T, g *testGit, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = g.dir
	cmd.Env = gitEnvForTests()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestInstallHookKeepsForeignHooks(t *testing.T) {
	bare := newTestGit(t, true)
	src := localSource(bare.dir)
	hook := filepath.Join(bare.dir, "hooks", "post-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho mine\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := InstallHook(t.Context(), src, HookConfig{}, false, Options{})
	wantCode(t, err, kiln.CodeConflict)
	if b, _ := os.ReadFile(hook); string(b) != "#!/bin/sh\necho mine\n" {
		t.Fatal("a foreign hook was overwritten")
	}
	if _, err := InstallHook(t.Context(), src, HookConfig{}, true, Options{}); err != nil {
		t.Fatalf("force: %v", err)
	}
	// Reinstalling over kiln's own hook needs no force.
	if _, err := InstallHook(t.Context(), src, HookConfig{Kiln: "/usr/local/bin/kiln"}, false, Options{}); err != nil {
		t.Fatalf("reinstall: %v", err)
	}
	if b, _ := os.ReadFile(hook); !strings.Contains(string(b), "kiln='/usr/local/bin/kiln'") {
		t.Errorf("reinstalled hook:\n%s", b)
	}
	entries, _ := os.ReadDir(filepath.Join(bare.dir, "hooks"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".post-receive-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}

	// A non-bare repository keeps hooks under .git, and core.hooksPath wins.
	work := newTestGit(t, false)
	if h, err := InstallHook(t.Context(), localSource(work.dir), HookConfig{}, false, Options{}); err != nil || h != filepath.Join(work.dir, ".git", "hooks", "post-receive") {
		t.Errorf("non-bare: %s %v", h, err)
	}
	custom := filepath.Join(t.TempDir(), "hooks")
	work.git("config", "core.hooksPath", custom)
	if h, err := InstallHook(t.Context(), localSource(work.dir), HookConfig{}, false, Options{}); err != nil || h != filepath.Join(custom, "post-receive") {
		t.Errorf("core.hooksPath: %s %v", h, err)
	}
	_, err = InstallHook(t.Context(), localSource(t.TempDir()), HookConfig{}, false, Options{})
	wantCode(t, err, kiln.CodeNotFound)
}

func TestHookScriptRejects(t *testing.T) {
	for _, c := range []HookConfig{
		{Source: "Bad Name"},
		{Source: "ok", Kiln: "kiln\nrm -rf /"},
		{Source: "ok", Env: []EnvVar{{"BAD-NAME", "x"}}},
		{Source: "ok", Env: []EnvVar{{"A; rm", "x"}}},
		{Source: "ok", Env: []EnvVar{{"A", "x\x00y"}}},
	} {
		if _, err := HookScript(c); kiln.ErrorCode(err) != kiln.CodeInvalid {
			t.Errorf("%+v: %v", c, err)
		}
	}
	s, err := HookScript(HookConfig{Source: "ok", Env: []EnvVar{{"A", "it's\nmulti-line"}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-n", "-c", s).CombinedOutput()
	if err != nil {
		t.Errorf("sh -n: %v %s\n%s", err, out, s)
	}
}

func TestPostReceiveHookFindsKilnOnPath(t *testing.T) {
	bare := newTestGit(t, true)
	tmp := t.TempDir()
	log := filepath.Join(tmp, "calls.log")
	fakeKiln(t, filepath.Join(tmp, "bin"), log)
	if _, err := InstallHook(t.Context(), localSource(bare.dir), HookConfig{}, false, Options{}); err != nil {
		t.Fatal(err)
	}
	work := newTestGit(t, false)
	c1 := work.commit("one", map[string]string{"a": "1"})
	cmd := exec.Command("git", "push", "-q", bare.dir, "main")
	cmd.Dir = work.dir
	cmd.Env = append(gitEnvForTests(), "PATH="+filepath.Join(tmp, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("push: %v %s", err, out)
	}
	got, _ := os.ReadFile(log)
	if want := "arg:trigger\narg:app\narg:--ref\narg:refs/heads/main\narg:--sha\narg:" + c1 + "\narg:--before\narg:" + zeros + "\nserver:\n--\n"; string(got) != want {
		t.Errorf("calls:\n%s\nwant\n%s", got, want)
	}
}
