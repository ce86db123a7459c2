package agent

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/kilnci/kiln/internal/proto"
)

// secretFile is the file in the state directory that holds the agent's
// secret: the orchestrator binds the agent id to it at the first
// registration (B113), so only this agent can register the id again.
const secretFile = "agent-secret"

// secretPrefix makes a leaked agent secret recognisable.
const secretPrefix = "kas_"

// loadOrCreateSecret returns the agent secret kept in dir, creating it
// (mode 0600) on the first start. A file others may read is narrowed to
// 0600 with a warning.
func loadOrCreateSecret(dir string, log *slog.Logger) (string, error) {
	path := filepath.Join(dir, secretFile)
	secret, err := readSecret(path, log)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return secret, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create the state directory: %w", err)
	}
	if secret, err = newAgentSecret(); err != nil {
		return "", err
	}
	// createFile writes through os.CreateTemp: the file is 0600 from its
	// first byte.
	if err := createFile(path, []byte(secret+"\n")); err != nil {
		if errors.Is(err, fs.ErrExist) { // another process sharing dir won
			return readSecret(path, log)
		}
		return "", fmt.Errorf("write the agent secret: %w", err)
	}
	return secret, nil
}

func readSecret(path string, log *slog.Logger) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("read the agent secret: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read the agent secret: %w", err)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if info.Mode().Perm()&0o077 != 0 {
		if err := f.Chmod(0o600); err != nil {
			return "", fmt.Errorf("%s may be read by other users and could not be made private: %w", path, err)
		}
		log.Warn("the agent secret could be read by other users; narrowed its mode to 0600", "path", path, "was", info.Mode().Perm().String())
	}
	b := make([]byte, proto.MaxSecretLen+2)
	n, _ := f.Read(b)
	secret := strings.TrimSpace(string(b[:n]))
	if err := proto.CheckAgentSecret(secret); err != nil {
		return "", fmt.Errorf("%s does not hold a valid agent secret; delete it together with %s to register as a new agent", path, idFile)
	}
	return secret, nil
}

func newAgentSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate the agent secret: %w", err)
	}
	return secretPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])), nil
}

// agentSecret is Config.Secret, or the one kept in the state directory, or
// one for this process only.
func agentSecret(cfg Config) (string, error) {
	switch {
	case cfg.Secret != "":
		return cfg.Secret, nil
	case cfg.StateDir != "":
		return loadOrCreateSecret(cfg.StateDir, cfg.Logger)
	}
	cfg.Logger.Warn("no state directory: the agent's secret lives only as long as this process, and a restart under the same id will be refused")
	return newAgentSecret()
}
