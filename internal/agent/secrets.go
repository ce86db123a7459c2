package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kilnci/kiln/internal/executor"
)

// readTokenFile reads the agent token from the first line of a file only
// the agent's user may read: a token file others can read is a token
// others have.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("the token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("the token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("the token file %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("the token file %s may be read by other users (mode %#o); make it private: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b := make([]byte, 1024)
	n, _ := f.Read(b)
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	token := strings.TrimSpace(line)
	if token == "" {
		return "", fmt.Errorf("the token file %s is empty", path)
	}
	return token, nil
}

// stepIsolation completes the executor's isolation settings with what
// only the agent knows: steps must not see its state directory (its id,
// its work root but for the job's own directory) nor its token file.
func stepIsolation(cfg Config) executor.Isolation {
	iso := cfg.Executor.Isolation
	iso.Hide = append([]string(nil), iso.Hide...)
	for _, p := range []string{cfg.StateDir, cfg.TokenFile} {
		if p != "" {
			iso.Hide = append(iso.Hide, p)
		}
	}
	return iso
}

// prepareStateDir creates the state directory before the work root is
// made in it. With a step user it must let that user pass (0711; its
// files stay private) to reach the job directories below.
func prepareStateDir(dir string, stepUser *executor.User) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the state directory: %w", err)
	}
	if stepUser == nil {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o011 != 0o011 {
		return os.Chmod(dir, fi.Mode().Perm()|0o011)
	}
	return nil
}

// defaultWorkRoot is the work root in the state directory: it belongs to
// the agent's user, unlike a shared $TMPDIR/kiln-work another user could
// have made first.
func defaultWorkRoot(stateDir string) string {
	if stateDir == "" {
		return ""
	}
	return filepath.Join(stateDir, "work")
}

var errNoToken = errors.New("the agent token is missing (--token-file, KILN_AGENT_TOKEN or --token)")
