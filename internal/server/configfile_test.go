package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// B240: a configuration file's mistakes are named by their dotted key and
// line, with the key probably meant, in the words of docs/configuration.md
// and never with a Go type name.
func TestConfigErrorsNameTheKeyAndSuggest(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"queue:\n  expirey: 5m\n", "line 2: unknown key queue.expirey; did you mean queue.expiry?"},
		{"agents:\n  expiry: 5m\n", "line 2: unknown key agents.expiry; did you mean queue.expiry?"},
		{"lsiten: :4000\n", "line 1: unknown key lsiten; did you mean listen?"},
		{"nonsense: 1\n", "line 1: unknown key nonsense; docs/configuration.md lists every key"},
		{"queue:\n  zzzzzzzz: 1\n", "unknown key queue.zzzzzzzz; the keys of queue are max_attempts, expiry"},
		{"agents:\n  ack_timeout: soon\n", `line 2: agents.ack_timeout: "soon" is not a duration like 30s or 5m`},
		{"queue:\n  max_attempts: many\n", `line 2: queue.max_attempts: "many" is not a whole number`},
		{"storage:\n  s3:\n    path_style: maybe\n", `line 3: storage.s3.path_style: "maybe" is not true or false`},
		{"queue: 5\n", `line 1: queue is a section of keys (key: value), not "5"`},
		{"listen: [a, b]\n", "line 1: listen: a list is not text"},
		{"- a\n", "line 1: the file is a section of keys (key: value), not a list"},
		{"listen: [\n", "config "},
	}
	dir := t.TempDir()
	for i, c := range cases {
		file := filepath.Join(dir, "kiln.yml")
		if err := os.WriteFile(file, []byte(c.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		err := cfg.LoadFile(file)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d: LoadFile(%q) = %v, want %q", i, c.yaml, err, c.want)
			continue
		}
		msg := strings.ReplaceAll(err.Error(), file, "FILE")
		for _, goName := range []string{"server.", "Config", "!!", "type ", "time.Duration", "int64"} {
			if strings.Contains(msg, goName) {
				t.Errorf("%d: LoadFile(%q) = %v, which names %q", i, c.yaml, err, goName)
			}
		}
	}
	file := filepath.Join(dir, "two.yml")
	os.WriteFile(file, []byte("queue:\n  expirey: 5m\n  max_attempts: x\n"), 0o600)
	cfg := DefaultConfig()
	if err := cfg.LoadFile(file); err == nil || !strings.Contains(err.Error(), "expirey") || !strings.Contains(err.Error(), "max_attempts") {
		t.Errorf("both mistakes of one file: %v", err)
	}
	for key, want := range map[string]string{
		"queue.expirey": `unknown configuration key "queue.expirey"; did you mean queue.expiry?`,
		"expiry":        `unknown configuration key "expiry"; did you mean queue.expiry?`,
		"no.such":       `unknown configuration key "no.such"; docs/configuration.md lists every key`,
	} {
		if err := cfg.Set(key, "1m"); err == nil || err.Error() != want {
			t.Errorf("Set(%q) = %v, want %q", key, err, want)
		}
	}
	os.WriteFile(file, []byte("# nothing yet\n"), 0o600)
	if err := cfg.LoadFile(file); err != nil {
		t.Errorf("a file of comments: %v", err)
	}
}
