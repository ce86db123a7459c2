package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestAgentIDIsCreatedOnceAndReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "kiln-agent")
	id, err := loadOrCreateID(dir, "Build Host.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, "build-host.example.com-") || len(id) != len("build-host.example.com-")+8 || checkAgentID(id) != nil {
		t.Fatalf("id %q", id)
	}
	again, err := loadOrCreateID(dir, "other-host")
	if err != nil || again != id {
		t.Fatalf("second load %q, %v", again, err)
	}
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("state dir %v, %v", info.Mode(), err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(tmps) != 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}
}

// Proves B43 (docs/behaviours.md).
func TestConcurrentAgentsAgreeOnOneID(t *testing.T) {
	dir := t.TempDir()
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			id, err := loadOrCreateID(dir, "h")
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("ids %v", ids)
		}
	}
}

func TestBadStateFileIsAClearError(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, idFile), []byte("not an id!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadOrCreateID(dir, "h")
	if err == nil || !strings.Contains(err.Error(), "does not hold a valid agent id") || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("err = %v", err)
	}
	// A directory that cannot be created.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := loadOrCreateID(filepath.Join(file, "sub"), "h"); err == nil {
		t.Fatal("no error for a state dir under a file")
	}
}

func TestNewAgentIDFromOddHostnames(t *testing.T) {
	for _, host := range []string{"", "---", "日本語", strings.Repeat("x", 300), "a b/c"} {
		id, err := newAgentID(host)
		if err != nil || checkAgentID(id) != nil {
			t.Errorf("%q: id %q, %v", host, id, err)
		}
	}
}

// A secret file others could read is narrowed to 0600 (and kept); one that
// holds no valid secret is a clear error.
// Proves B113 (docs/behaviours.md).
func TestAgentSecretFileIsPrivate(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	secret, err := loadOrCreateSecret(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, secretFile)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := loadOrCreateSecret(dir, log)
	if err != nil || again != secret {
		t.Fatalf("reloaded %q, %v; was %q", again, err, secret)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", info.Mode(), err)
	}
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateSecret(dir, log); err == nil || !strings.Contains(err.Error(), "does not hold a valid agent secret") {
		t.Fatalf("a bad secret file: %v", err)
	}
}
