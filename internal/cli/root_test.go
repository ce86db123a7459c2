package cli

import (
	"bytes"
	"context"
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
