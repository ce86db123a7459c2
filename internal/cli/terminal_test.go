package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/api"
)

func TestTerminalSafe(t *testing.T) {
	cases := []struct {
		in, plain, colour string
	}{
		{"plain text\tand a tab", "plain text\tand a tab", "plain text\tand a tab"},
		{"héllo wörld ✓", "héllo wörld ✓", "héllo wörld ✓"},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`, "\x1b[31mred\x1b[0m"},
		{"\x1b[1;32mok", `\x1b[1;32mok`, "\x1b[1;32mok"},
		// Anything but SGR stays escaped, even on a terminal.
		{"\x1b]0;pwned\x07title", `\x1b]0;pwned\x07title`, `\x1b]0;pwned\x07title`},
		{"\x1b[2J\x1b[Hclear", `\x1b[2J\x1b[Hclear`, `\x1b[2J\x1b[Hclear`},
		{"\x1b[6n", `\x1b[6n`, `\x1b[6n`},
		{"fake\rreal", `fake\x0dreal`, `fake\x0dreal`},
		{"line\nbreak", `line\x0abreak`, `line\x0abreak`},
		{"bell\x07 del\x7f back\b", `bell\x07 del\x7f back\x08`, `bell\x07 del\x7f back\x08`},
		{"c1 \u009b31m", `c1 \u009b31m`, `c1 \u009b31m`},
		{"raw \x9b31m", `raw \x9b31m`, `raw \x9b31m`},
		{"bidi \u202egnp.exe", `bidi \u202egnp.exe`, `bidi \u202egnp.exe`},
		{"\x1b[31", `\x1b[31`, `\x1b[31`},
	}
	for _, c := range cases {
		if got := terminalSafe(c.in, false); got != c.plain {
			t.Errorf("terminalSafe(%q, false) = %q, want %q", c.in, got, c.plain)
		}
		if got := terminalSafe(c.in, true); got != c.colour {
			t.Errorf("terminalSafe(%q, true) = %q, want %q", c.in, got, c.colour)
		}
	}
}

// A step's log line and an agent's hostname and version reach the
// terminal with their control sequences made visible.
func TestLogsAndAgentsEscapeControlSequences(t *testing.T) {
	o := newOp(t)
	o.Dispatch(t)
	l := o.Claim(t, "agent-1")
	o.Log(t, l, 0, 1, "\x1b]0;owned\x07\x1b[2Jclean", "\x1b[32mgreen\x1b[0m")
	out := o.ok(t, "logs", "1", "build", "--step", "0")
	if strings.ContainsRune(out, 0x1b) || strings.ContainsRune(out, 0x07) {
		t.Fatalf("raw control characters in the log output: %q", out)
	}
	if !strings.Contains(out, `\x1b]0;owned\x07\x1b[2Jclean`) || !strings.Contains(out, `\x1b[32mgreen`) {
		t.Fatalf("log output %q", out)
	}
	o.Fleet.Connect(api.AgentView{ID: "box-9", Labels: []string{"linux"}, MaxJobs: 1, Healthy: true,
		Hostname: "box\x1b[2J\rx", Version: "1.0\x1b]2;t\x07\t9"})
	out = o.ok(t, "agents", "list")
	if strings.ContainsAny(out, "\x1b\r\x07") {
		t.Fatalf("raw control characters in the agent list: %q", out)
	}
	if !strings.Contains(out, `box\x1b[2J\x0dx`) || !strings.Contains(out, `1.0\x1b]2;t\x07\t9`) {
		t.Fatalf("agent list %q", out)
	}
}

// B248: colour only on a terminal, and never when NO_COLOR is set.
func TestColourRespectsNOCOLOR(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "NO_COLOR" {
				return v
			}
			return ""
		}
	}
	if !wantColour(true, env("")) || wantColour(true, env("1")) || wantColour(false, env("")) {
		t.Fatal("colour: want it on a terminal without NO_COLOR only")
	}
	var buf strings.Builder
	if isTerminal(&buf) {
		t.Fatal("a buffer is not a terminal")
	}
}

// A token's secret redirected to a file is not announced as "below".
func TestSecretNoteSaysWhereTheSecretWent(t *testing.T) {
	var buf bytes.Buffer
	if got := secretNote(&env{stdout: &buf}, "the secret"); got != "the secret is written to stdout, and shown only once: keep it" {
		t.Errorf("redirected: %q", got)
	}
}
