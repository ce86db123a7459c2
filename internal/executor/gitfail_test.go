package executor

import (
	"strings"
	"testing"
)

// B274: what git printed becomes a cause a person reads, and only the
// failures that may pass are retried.
func TestClassifyGit(t *testing.T) {
	for _, c := range []struct {
		stderr    string
		cause     string
		transient bool
	}{
		{"fatal: unable to access 'https://git.example.com/a.git/': Could not resolve host: git.example.com", "could not resolve host git.example.com", true},
		{"fatal: unable to access 'http://127.0.0.1:9/a.git/': Failed to connect to 127.0.0.1 port 9 after 0 ms: Connection refused", "could not connect to 127.0.0.1:9 (connection refused)", true},
		{"fatal: unable to access 'https://git.example.com/a.git/': The requested URL returned error: 502", "git.example.com answered HTTP 502", true},
		{"fatal: unable to access 'https://git.example.com/a.git/': The requested URL returned error: 404", "git.example.com answered HTTP 404", false},
		{"ssh: connect to host git.example.com port 22: Connection refused\nfatal: Could not read from remote repository.", "could not connect to git.example.com:22 (connection refused)", true},
		{"error: RPC failed; curl 18 transfer closed\nfatal: early EOF", "the connection to git.example.com broke off", true},
		{"fatal: remote error: upload-pack: not our ref 0123", "git.example.com does not serve that commit or ref", false},
		{"fatal: could not read Username for 'https://git.example.com': terminal prompts disabled", "git.example.com refused the credentials (or asked for some and kiln has none)", false},
		{"something else entirely", "", false},
	} {
		f := classifyGit("fetch", 128, strings.Split(c.stderr, "\n"), "https://git.example.com/a.git")
		if f.cause != c.cause || f.transient != c.transient {
			t.Errorf("%q: cause %q transient %v, want %q %v", c.stderr, f.cause, f.transient, c.cause, c.transient)
		}
	}
	if got := classifyGit("fetch", 128, nil, "x").Error(); got != "git fetch failed with exit code 128" {
		t.Errorf("unrecognised failure: %q", got)
	}
}

// B274: git's stderr is the remote server's to shape; classifying it
// never panics and the cause stays one line.
func FuzzClassifyGit(f *testing.F) {
	f.Add("fatal: unable to access 'x': Failed to connect to h port 1: Connection refused", "https://h/a.git")
	f.Add("ssh: connect to host h port 22: timed out", "git@h:a/b.git")
	f.Add("The requested URL returned error: 503", "")
	f.Fuzz(func(t *testing.T, stderr, remote string) {
		g := classifyGit("fetch", 1, strings.Split(stderr, "\n"), remote)
		if strings.Contains(g.cause, "\n") {
			t.Fatalf("cause spans lines: %q", g.cause)
		}
		_ = g.Error()
	})
}
