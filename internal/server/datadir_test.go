package server

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A data directory and database left readable by others (as mkdir and a
// default umask make them) are narrowed to the server's user at start,
// with a warning; a new database is private from its first byte.
func TestDataDirAndDatabaseArePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kiln-data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	db := filepath.Join(dir, "kiln.db")
	if err := os.WriteFile(db, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(db, 0o644)
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	cfg := DefaultConfig()
	cfg.DataDir = dir
	if err := secureDataDir(cfg, log); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, db: 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %#o", p, fi.Mode().Perm(), err, want)
		}
	}
	if strings.Count(logged.String(), "narrowed its mode") != 2 {
		t.Errorf("the server did not warn about both:\n%s", logged.String())
	}

	fresh := filepath.Join(t.TempDir(), "new")
	cfg.DataDir = fresh
	logged.Reset()
	if err := secureDataDir(cfg, log); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(fresh, "kiln.db")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a new database: %v %v", fi, err)
	}
	if logged.Len() != 0 {
		t.Errorf("warned about a fresh data directory:\n%s", logged.String())
	}
}
