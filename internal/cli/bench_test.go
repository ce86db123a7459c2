package cli

import (
	"strings"
	"testing"
)

// The bench runs for real in internal/bench; here: its flags are checked
// before anything starts, and refusals are usage errors.
func TestBenchRefusesBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--agents", "0"}, "agents must be between 1 and 10000, got 0"},
		{[]string{"bench", "--scenario", "webhook,warp"}, `unknown scenario "warp"`},
		{[]string{"bench", "--idle-agents", "20000"}, "idle agents must be between 1 and 10000"},
		{[]string{"bench", "--database", "mysql://db"}, "postgres:// URL"},
		{[]string{"bench", "extra"}, "unknown command"},
	}
	for _, tc := range cases {
		code, out, errOut := runCLI(t, nil, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("kiln %s: exit %d, stdout %q, stderr %q; want exit 2 mentioning %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
}
