package cli

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
)

// runCLI runs kiln in-process and returns its exit code and output.
func runCLI(t *testing.T, vars map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	code = run(context.Background(), args, e)
	return code, out.String(), errb.String()
}

func TestHelpListsCommands(t *testing.T) {
	code, out, _ := runCLI(t, nil, "--help")
	if code != ExitOK || !strings.Contains(out, "version") {
		t.Fatalf("code %d, out:\n%s", code, out)
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	code, _, errOut := runCLI(t, nil, "frobnicate")
	if code != ExitUsage || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("code %d, stderr: %s", code, errOut)
	}
}

// B241: kiln completion prints a completion script for each shell
// docs/cli.md names, and a shell it does not know is a usage error.
func TestCompletionScripts(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash": "__start_kiln", "zsh": "#compdef kiln", "fish": "complete -c kiln",
	} {
		code, out, errOut := runCLI(t, nil, "completion", shell)
		if code != ExitOK || !strings.Contains(out, marker) {
			t.Errorf("kiln completion %s: code %d, %d bytes without %q; stderr %s", shell, code, len(out), marker, errOut)
		}
	}
	if code, _, _ := runCLI(t, nil, "completion", "tcsh"); code != ExitUsage {
		t.Errorf("kiln completion tcsh: code %d, want %d", code, ExitUsage)
	}
	if _, out, _ := runCLI(t, nil, "--help"); !strings.Contains(out, "completion") {
		t.Errorf("kiln --help does not list completion:\n%s", out)
	}
}

func TestVersionSaysWhatItKnows(t *testing.T) {
	code, out, _ := runCLI(t, nil, "version")
	if code != ExitOK || !strings.HasPrefix(out, "kiln ") || !strings.Contains(out, runtime.Version()) || strings.Contains(out, "kiln dev\n") {
		t.Fatalf("code %d:\n%s", code, out)
	}
}
