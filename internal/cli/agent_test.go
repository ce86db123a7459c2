package cli

import (
	"strings"
	"testing"
)

func TestAgentUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		vars map[string]string
		args []string
		want string
	}{
		{"no server", nil, []string{"agent", "--token", "kat_x"}, "the orchestrator URL is missing (--server or KILN_AGENT_SERVER)"},
		{"bad scheme", nil, []string{"agent", "--server", "ftp://ci", "--token", "kat_x"}, "must start with ws://, wss://, http:// or https://"},
		{"bad env URL", map[string]string{"KILN_AGENT_SERVER": "ci.example.com:8080", "KILN_AGENT_TOKEN": "kat_x"}, []string{"agent"}, `"ci.example.com:8080" must start with`},
		{"no token", map[string]string{"KILN_AGENT_SERVER": "http://127.0.0.1:1"}, []string{"agent"}, "the agent token is missing (--token or KILN_AGENT_TOKEN)"},
		{"bad max jobs env", map[string]string{"KILN_AGENT_MAX_JOBS": "many"}, []string{"agent", "--server", "http://h:1", "--token", "t"}, `KILN_AGENT_MAX_JOBS="many" is not a number`},
		{"zero max jobs", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a", "--max-jobs", "0"}, "max jobs must be at least 1, not 0"},
		{"huge max jobs", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a", "--max-jobs", "2000"}, "max jobs must be between 1 and 1024"},
		{"bad id", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a b"}, "may only contain"},
		{"bad label", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a", "--labels", "ok, has space"}, "labels:"},
		{"no home", nil, []string{"agent", "--server", "http://h:1", "--token", "t"}, "neither XDG_STATE_HOME nor HOME is set"},
		{"argument", nil, []string{"agent", "extra"}, "unknown command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.vars, tc.args...)
			if code != ExitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("code %d, stderr:\n%s\nwant %q", code, stderr, tc.want)
			}
		})
	}
}

func TestAgentHelpNamesTheEnvironment(t *testing.T) {
	code, out, _ := runCLI(t, nil, "agent", "--help")
	for _, want := range []string{"--server", "KILN_AGENT_SERVER", "KILN_AGENT_STATE_DIR", "--max-jobs", "second signal"} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("help lacks %q (code %d)", want, code)
		}
	}
}
