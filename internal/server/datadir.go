package server

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// secureDataDir creates the data directory, or narrows the one there, to
// the server's user alone (0700), and the SQLite database in it to 0600,
// warning about each that was wider: they hold source secrets, token
// hashes, the logs and the local agents' token. A new database file is
// made 0600 before SQLite opens it, so its journal files get that mode too.
func secureDataDir(cfg Config, log *slog.Logger) error {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	if err := narrow(cfg.DataDir, 0o700, log); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	db := sqlitePath(cfg)
	if db == "" {
		return nil
	}
	f, err := os.OpenFile(db, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	f.Close()
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if err := narrow(p, 0o600, log); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("database: %w", err)
		}
	}
	return nil
}

// narrow takes away every permission of path beyond max, with a warning.
func narrow(path string, max fs.FileMode, log *slog.Logger) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&^max != 0 {
		log.Warn("other users could read this; narrowed its mode", "path", path, "was", fmt.Sprintf("%#o", perm), "now", fmt.Sprintf("%#o", perm&max))
		return os.Chmod(path, perm&max)
	}
	return nil
}

// sqlitePath is the SQLite database file, "" for PostgreSQL.
func sqlitePath(cfg Config) string {
	url := databaseURL(cfg)
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		return ""
	}
	p := strings.TrimPrefix(strings.TrimPrefix(url, "sqlite://"), "file:")
	p, _, _ = strings.Cut(p, "?")
	if p == "" || strings.Contains(p, ":memory:") {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return filepath.Clean(p)
}
