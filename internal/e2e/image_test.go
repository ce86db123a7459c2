package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/waittest"
)

// B275: scripts/image builds the Dockerfile's server image FROM scratch on
// the local Docker Engine (nothing pulled); a container of it knows its
// version, runs the server with no local agents and answers /ready.
func TestServerImageAnswersReady(t *testing.T) {
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skipf("SKIPPED LOUDLY: no Docker Engine answers (docker info: %v); the server image is not tested", err)
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("SKIPPED LOUDLY: /bin/busybox is missing (install Debian's busybox-static); the server image is not tested")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tag := "kiln-e2e:" + strings.ToLower(rand.Text()[:12])
	if b, err := exec.Command(filepath.Join(root, "scripts/image"), tag).CombinedOutput(); err != nil {
		t.Fatalf("scripts/image: %v\n%s", err, b)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })

	b, err := exec.Command("docker", "run", "--rm", "--network", "none", tag, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(b), "kiln v") || strings.Contains(string(b), "dev") {
		t.Fatalf("kiln version in the image: %v\n%s", err, b)
	}

	port := freePort(t)
	name := "kiln-e2e-" + strings.ToLower(rand.Text()[:12])
	// Host networking, on loopback only: the test reaches the server and
	// the server reaches nothing else.
	if b, err := exec.Command("docker", "run", "-d", "--name", name, "--network", "host",
		"-e", fmt.Sprintf("KILN_LISTEN=127.0.0.1:%d", port), tag).CombinedOutput(); err != nil {
		t.Fatalf("docker run: %v\n%s", err, b)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	logs := func() string {
		b, _ := exec.Command("docker", "logs", name).CombinedOutput()
		return string(b)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/ready", port)
	waittest.UntilState(t, time.Minute, "the container's server to be ready", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error() + "\n" + logs()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status + "\n" + logs()
	})
}
