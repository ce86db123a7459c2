package server

import (
	"os"
	"path/filepath"
	"testing"
)

// A configuration file and --set values are typed by people and pasted
// from elsewhere: any bytes give an explained error or a configuration,
// never a panic, and a configuration that loads is then validated.
// Proves B79 (docs/behaviours.md).
func FuzzConfigFile(f *testing.F) {
	for _, seed := range []string{
		"listen: 127.0.0.1:4000\ndata_dir: /var/lib/kiln\n",
		"agents:\n  ack_timeout: 5s\n  unhealthy_after: 1m\n",
		"webhooks: {dedup_ttl: 48h}\nlocal_agents: 2\n",
		"agents: [1, 2]\n",
		"listen: &a x\nother: *a\n",
		"agnets:\n  ack_timeout: 5s\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "kiln.yml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c := DefaultConfig()
		if c.LoadFile(path) == nil {
			_ = c.Validate()
		}
	})
}

// FuzzConfigSet: any key and value through --set (or the environment).
// Proves B79 (docs/behaviours.md).
func FuzzConfigSet(f *testing.F) {
	f.Add("listen", "127.0.0.1:4000")
	f.Add("agents.ack_timeout", "5s")
	f.Add("local_agents", "-1")
	f.Add("webhooks.dedup_ttl", "9999999999999h")
	f.Add("database", "postgres://kiln:hunter2@db/kiln?sslmode=disable")
	f.Add("agnets.ack_timeout", "5s")
	f.Fuzz(func(t *testing.T, key, raw string) {
		c := DefaultConfig()
		if c.Set(key, raw) == nil {
			_ = c.Validate()
		}
	})
}
