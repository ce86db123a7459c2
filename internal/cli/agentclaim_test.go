package cli

import (
	"strings"
	"testing"
)

// --claim (or KILN_AGENT_CLAIM) gives the agent its token, id and labels:
// combined with any of them it is a usage error.
// Proves B149 (docs/behaviours.md).
func TestAgentClaimUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"agent", "--server", "http://h:1", "--claim", "kcl_x", "--token", "kat_x"},
		{"agent", "--server", "http://h:1", "--claim", "kcl_x", "--id", "a"},
		{"agent", "--server", "http://h:1", "--claim", "kcl_x", "--labels", "a"},
	} {
		code, _, stderr := runCLI(t, map[string]string{"HOME": t.TempDir()}, args...)
		if code != ExitUsage || !strings.Contains(stderr, "--claim gives the agent its token, id and labels") {
			t.Fatalf("%v: code %d, stderr:\n%s", args, code, stderr)
		}
	}
	code, _, stderr := runCLI(t, map[string]string{"HOME": t.TempDir(), "KILN_AGENT_CLAIM": "kcl_x", "KILN_AGENT_TOKEN": "kat_x"}, "agent", "--server", "http://h:1")
	if code != ExitUsage || !strings.Contains(stderr, "--claim gives") {
		t.Fatalf("KILN_AGENT_CLAIM with a token: code %d, stderr:\n%s", code, stderr)
	}
}
