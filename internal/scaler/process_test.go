package scaler_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/scalertest"
)

var (
	buildOnce sync.Once
	kilnBin   string
	buildErr  error
)

// kiln builds ./cmd/kiln once for the process backend's tests.
func kiln(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kiln-scaler-bin-")
		if err != nil {
			buildErr = err
			return
		}
		kilnBin = filepath.Join(dir, "kiln")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", kilnBin, "../../cmd/kiln")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = err
			kilnBin = out.String()
		}
	})
	if buildErr != nil {
		t.Fatalf("build kiln: %v\n%s", buildErr, kilnBin)
	}
	return kilnBin
}

// The process backend passes the conformance suite: `kiln agent` started
// with the request's token (in its environment), id and labels, one job at
// a time, gone once destroyed (SIGTERM to its process group, then SIGKILL).
// Proves B179 (docs/behaviours.md).
func TestProcessBackendConformance(t *testing.T) {
	scalertest.Run(t, func(t *testing.T) scaler.Backend {
		return &scaler.Process{Binary: kiln(t), StateRoot: t.TempDir(), KillAfter: 5 * time.Second}
	})
}

// An agent binary that cannot start is a spawn error naming it, with
// nothing left behind.
// Proves B179 (docs/behaviours.md).
func TestProcessBackendMissingBinary(t *testing.T) {
	root := t.TempDir()
	p := &scaler.Process{Binary: filepath.Join(root, "no-such-kiln"), StateRoot: root}
	_, err := p.Spawn(context.Background(), scaler.SpawnRequest{AgentID: "scaler-process-x", ServerURL: "http://127.0.0.1:9",
		Token: "t", Event: func(string, string) {}})
	if err == nil || !strings.HasPrefix(err.Error(), "agent process error: ") || !strings.Contains(err.Error(), "no-such-kiln") {
		t.Fatalf("error %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "scaler-process-x-*")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}
