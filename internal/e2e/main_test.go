package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/web/webtest"
)

// kilnBin is the kiln binary TestMain builds: every agent, server process
// and CLI call of these tests runs it.
var kilnBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kiln-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kilnBin, err = buildKiln(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build the kiln binary:", err)
		return 1
	}
	code := storetest.Main(m)
	webtest.Close() // the browser of the dashboard tests, if one started
	if code == 0 {
		// The in-process servers (server.Run) and clients of the tests
		// must all have ended.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: goroutines left after the tests:", err)
			return 1
		}
	}
	return code
}

// buildKiln builds ./cmd/kiln of this module into dir, with the race
// detector when this test binary has it.
func buildKiln(dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	bin := filepath.Join(dir, "kiln")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/kiln")...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w\n%s", err, out.String())
	}
	return bin, nil
}

// poll is how often the tests look again at what they wait for.
const poll = 50 * time.Millisecond
