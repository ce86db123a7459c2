package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaultsAreValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.PublicURL != "http://127.0.0.1:4000" || !filepath.IsAbs(c.DataDir) {
		t.Fatalf("derived: public_url %q, data_dir %q", c.PublicURL, c.DataDir)
	}
}

func TestPrecedenceFileEnvSet(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "kiln.yml")
	os.WriteFile(file, []byte("listen: :5000\nagents:\n  ack_timeout: 3s\n  drop_after: 10m\nqueue:\n  max_attempts: 2\n"), 0o600)
	c := DefaultConfig()
	if err := c.LoadFile(file); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KILN_AGENTS_ACK_TIMEOUT": "7s", "KILN_LOCAL_AGENTS": "0"}
	if err := c.LoadEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if err := c.Set("queue.max_attempts", "9"); err != nil {
		t.Fatal(err)
	}
	if c.Listen != ":5000" || c.Agents.AckTimeout != 7*time.Second || c.Agents.DropAfter != 10*time.Minute ||
		c.LocalAgents != 0 || c.Queue.MaxAttempts != 9 || c.Agents.HeartbeatInterval != 30*time.Second {
		t.Fatalf("got %+v", c)
	}
}

// Proves B79 (docs/behaviours.md).
func TestBadConfigIsExplained(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "kiln.yml")
	os.WriteFile(file, []byte("agents:\n  ack_timout: 3s\n"), 0o600)
	c := DefaultConfig()
	if err := c.LoadFile(file); err == nil || !strings.Contains(err.Error(), "ack_timout") {
		t.Fatalf("unknown key: %v", err)
	}
	os.WriteFile(file, []byte("agents:\n  ack_timeout: soon\n"), 0o600)
	if err := c.LoadFile(file); err == nil {
		t.Fatal("bad duration accepted")
	}
	c = DefaultConfig()
	if err := c.LoadEnv(func(k string) string {
		if k == "KILN_QUEUE_MAX_ATTEMPTS" {
			return "many"
		}
		return ""
	}); err == nil || !strings.Contains(err.Error(), "KILN_QUEUE_MAX_ATTEMPTS") {
		t.Fatalf("bad env: %v", err)
	}
	if err := c.Set("no.such", "1"); err == nil {
		t.Fatal("unknown key set")
	}
	c = DefaultConfig()
	c.Listen = "4000"
	c.Agents.DropAfter = time.Second
	c.Database = "mysql://u:secret@h/db"
	c.Log.Level = "loud"
	err := c.Validate()
	for _, want := range []string{"listen", "drop_after", "database", "log.level"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validation error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("validation error leaks a password: %v", err)
	}
}

// TestEveryKeyIsDocumented keeps docs/configuration.md in step with Config.
func TestEveryKeyIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range Keys() {
		if kv[1] == "" {
			t.Errorf("key %s has no doc tag", kv[0])
		}
		if !strings.Contains(string(doc), "`"+kv[0]+"`") {
			t.Errorf("docs/configuration.md does not describe `%s`", kv[0])
		}
		env := "KILN_" + strings.ToUpper(strings.ReplaceAll(kv[0], ".", "_"))
		if !strings.Contains(string(doc), env) {
			t.Errorf("docs/configuration.md does not name %s", env)
		}
	}
}

func TestMetricsConfigIsChecked(t *testing.T) {
	c := DefaultConfig()
	c.Metrics.Listen = c.Listen
	c.Metrics.BackpressureThreshold = 0
	c.Metrics.RefreshInterval = 0
	err := c.Validate()
	for _, want := range []string{"metrics.listen must differ", "metrics.backpressure_threshold", "metrics.refresh_interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validation error lacks %q: %v", want, err)
		}
	}
	c = DefaultConfig()
	c.Metrics.Listen = "9464"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "metrics.listen") {
		t.Errorf("metrics.listen without a host: %v", err)
	}
	c = DefaultConfig()
	c.Listen, c.Metrics.Listen = "127.0.0.1:0", "127.0.0.1:0" // two ports the system picks
	if err := c.Validate(); err != nil {
		t.Errorf("two :0 listeners refused: %v", err)
	}
}

// The scalers of a configuration file are strict, like the rest of it: a
// misspelt key names the closest one, a bad value its key.
// Proves B166 (docs/behaviours.md).
func TestScalersInTheFileAreStrict(t *testing.T) {
	dir := t.TempDir()
	load := func(body string) error {
		path := filepath.Join(dir, "kiln.yml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c := DefaultConfig()
		if err := c.LoadFile(path); err != nil {
			return err
		}
		return c.Validate()
	}
	err := load("scalers:\n  - name: builders\n    type: process\n    labels: [scaled]\n    max_agent: 4\n")
	if err == nil || !strings.Contains(err.Error(), `unknown key "max_agent"; did you mean "max_agents"?`) {
		t.Fatalf("typo: %v", err)
	}
	err = load("scalers:\n  - name: builders\n    type: procss\n    labels: [scaled]\n    max_agents: 4\nscaler_caps:\n  cpus: many\n")
	if err == nil || !strings.Contains(err.Error(), "scaler_caps.cpus") {
		t.Fatalf("caps: %v", err)
	}
	err = load("scalers:\n  - name: builders\n    type: procss\n    labels: [scaled]\n    max_agents: 4\n")
	if err == nil || !strings.Contains(err.Error(), `scalers[0] (builders).type: "procss" is not one of`) {
		t.Fatalf("type: %v", err)
	}
	if err := load("scalers:\n  - name: builders\n    type: process\n    labels: [scaled]\n    max_agents: 4\n"); err != nil {
		t.Fatalf("a good scaler: %v", err)
	}
}
