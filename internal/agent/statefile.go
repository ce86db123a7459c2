package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// idFile is the file in the state directory that holds the agent id.
const idFile = "agent-id"

// loadOrCreateID returns the agent id kept in dir, creating it on the first
// start. The id must be stable across restarts: the orchestrator recognises a
// restarted agent by it, and an agent that came back with a new id would
// leave its old jobs to the recovery window.
func loadOrCreateID(dir, hostname string) (string, error) {
	path := filepath.Join(dir, idFile)
	id, err := readID(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return id, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create the state directory: %w", err)
	}
	id, err = newAgentID(hostname)
	if err != nil {
		return "", err
	}
	if err := createFile(path, []byte(id+"\n")); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another agent process sharing the directory won the race:
			// its id is the one on disk, so it is ours too.
			return readID(path)
		}
		return "", fmt.Errorf("write the agent id: %w", err)
	}
	return id, nil
}

func readID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("read the agent id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if err := checkAgentID(id); err != nil {
		return "", fmt.Errorf("%s does not hold a valid agent id (%v); fix it or delete it to get a new id", path, err)
	}
	return id, nil
}

// createFile writes a new file atomically: the content goes to a temporary
// file that is synced and then linked into place, so a reader never sees a
// partial id and an existing file is never replaced (fs.ErrExist).
func createFile(path string, content []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() // best effort: make the new directory entry durable
		d.Close()
	}
	return nil
}

// newAgentID is <hostname>-<8 hex digits>, the hostname reduced to the
// characters ids may hold.
func newAgentID(hostname string) (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate an agent id: %w", err)
	}
	host := strings.Map(func(r rune) rune {
		if idRune(r) {
			return r
		}
		return '-'
	}, strings.ToLower(hostname))
	host = strings.Trim(host, "-.")
	if len(host) > 64 {
		host = host[:64]
	}
	if host == "" {
		host = "agent"
	}
	return host + "-" + hex.EncodeToString(b[:]), nil
}
