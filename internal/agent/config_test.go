package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

func TestServerURL(t *testing.T) {
	good := map[string]string{
		"http://127.0.0.1:8080":          "ws://127.0.0.1:8080/ws",
		"https://ci.example.com":         "wss://ci.example.com/ws",
		"https://ci.example.com/":        "wss://ci.example.com/ws",
		"https://ci.example.com/kiln":    "wss://ci.example.com/kiln/ws",
		"ws://10.0.0.1:9000/ws":          "ws://10.0.0.1:9000/ws",
		"WSS://ci.example.com/agents":    "wss://ci.example.com/agents",
		"ws://[::1]:8080":                "ws://[::1]:8080/ws",
		"HTTP://host:1/a%20b":            "ws://host:1/a%20b/ws",
		"wss://ci.example.com:443/ws/":   "wss://ci.example.com:443/ws",
		"http://ci.example.com:8080/ws/": "ws://ci.example.com:8080/ws/ws",
	}
	for in, want := range good {
		if got, err := ServerURL(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                         "missing",
		"ci.example.com:8080":      "must start with",
		"ftp://ci.example.com":     "must start with",
		"http://":                  "no host",
		"http://:8080":             "no host",
		"https://user:pw@ci.com":   "must not carry credentials",
		"https://ci.com/?token=x":  "query or fragment",
		"https://ci.com/#x":        "query or fragment",
		"http://ci.com:bad":        "does not parse",
		"http://ci.example.com\n/": "does not parse",
	}
	for in, want := range bad {
		if _, err := ServerURL(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", in, err, want)
		}
	}
}

func FuzzServerURL(f *testing.F) {
	for _, s := range []string{"http://h:1", "wss://h/x/", "ws://[::1]/", "https://u@h", "h:1", "http://h/%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := ServerURL(raw)
		if err != nil {
			return
		}
		if !strings.HasPrefix(u, "ws://") && !strings.HasPrefix(u, "wss://") {
			t.Fatalf("%q -> %q", raw, u)
		}
		// Normalizing twice changes nothing.
		if again, err := ServerURL(u); err != nil || again != u {
			t.Fatalf("%q -> %q -> %q, %v", raw, u, again, err)
		}
	})
}

func TestDefaultStateDir(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if d, _ := DefaultStateDir(env(map[string]string{"XDG_STATE_HOME": "/x/state", "HOME": "/home/u"})); d != "/x/state/kiln-agent" {
		t.Errorf("with XDG_STATE_HOME: %q", d)
	}
	if d, _ := DefaultStateDir(env(map[string]string{"XDG_STATE_HOME": "relative", "HOME": "/home/u"})); d != "/home/u/.local/state/kiln-agent" {
		t.Errorf("with a relative XDG_STATE_HOME: %q", d)
	}
	if _, err := DefaultStateDir(env(nil)); err == nil {
		t.Error("no error without HOME")
	}
}

func TestRunRefusesBadConfigs(t *testing.T) {
	base := func() Config {
		return Config{Server: "http://127.0.0.1:1", Token: "kat_x", StateDir: t.TempDir(), Runner: newFakeRunner()}
	}
	cases := []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Server = "" }, "orchestrator URL is missing"},
		{func(c *Config) { c.Server = "tcp://x" }, "must start with"},
		{func(c *Config) { c.Token = "" }, "token is missing"},
		{func(c *Config) { c.Token = "two words" }, "one word"},
		{func(c *Config) { c.ID = "bad id" }, "may only contain"},
		{func(c *Config) { c.ID = strings.Repeat("a", 200) }, "longer than 128"},
		{func(c *Config) { c.StateDir = "" }, "state directory"},
		{func(c *Config) { c.Labels = []string{"a,b"} }, "labels:"},
		{func(c *Config) { c.Labels = make([]string, 63); fillLabels(c.Labels) }, "at most 64 labels"},
		{func(c *Config) { c.MaxJobs = -1 }, "max jobs"},
		{func(c *Config) { c.MaxJobs = 5000 }, "max jobs"},
		{func(c *Config) { c.BufferFrames = 1 }, "at least 2 frames"},
		{func(c *Config) { c.MaxFrameLines = 6000 }, "lines per log frame"},
		{func(c *Config) { c.HeartbeatInterval = -1 }, "heartbeat interval must not be negative"},
		{func(c *Config) { c.MinReconnectDelay = 120e9 }, "maximum reconnect delay is shorter"},
	}
	for _, tc := range cases {
		cfg := base()
		tc.mutate(&cfg)
		err := Run(context.Background(), cfg)
		if kiln.ErrorCode(err) != kiln.CodeInvalid || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
}

func fillLabels(l []string) {
	for i := range l {
		l[i] = "l" + strings.Repeat("x", i)
	}
}
