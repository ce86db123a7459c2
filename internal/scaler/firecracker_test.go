package scaler_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kilnci "github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/scalertest"
)

// fakeFirecracker is a Firecracker backend whose VMM is this test binary
// speaking Firecracker's API on its unix socket (firecracker_fake_test.go)
// and whose guest is a real kiln agent: the Firecracker binary cannot be
// installed here. TAP devices are not made (no CAP_NET_ADMIN); the
// network-interfaces call still goes through the API.
func fakeFirecracker(t *testing.T, env ...string) (*scaler.Firecracker, scaler.Config) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kernel, rootfs := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "rootfs.ext4")
	for _, f := range []string{kernel, rootfs} {
		if err := os.WriteFile(f, []byte("not really"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var taps []string
	fc := &scaler.Firecracker{Binary: self, StateRoot: t.TempDir(), KillAfter: 5 * time.Second,
		Env: append(append(os.Environ(), "KILN_FAKE_FIRECRACKER=1", "KILN_FAKE_FC_AGENT="+kiln(t)), env...),
		Tap: func(_ context.Context, name string) (func(), error) { taps = append(taps, name); return func() {}, nil }}
	c := scaler.Config{Name: "vms", Type: "firecracker", Kernel: kernel, Rootfs: rootfs, SocketWait: 20 * time.Second, VCPUs: 1, Memory: "256m"}
	return fc, c
}

// The firecracker backend passes the conformance suite against a VMM
// speaking Firecracker's API on its unix socket, whose guest is a real
// kiln agent booted with the MMDS settings.
// Proves B193 (docs/behaviours.md).
func TestFirecrackerBackendConformance(t *testing.T) {
	scalertest.Run(t, func(t *testing.T) scaler.Backend {
		fc, c := fakeFirecracker(t)
		return withConfig{fc, c}
	})
}

// withConfig gives every spawn the scaler's configuration, as the manager
// does.
type withConfig struct {
	b scaler.Backend
	c scaler.Config
}

func (w withConfig) Spawn(ctx context.Context, req scaler.SpawnRequest) (scaler.Instance, error) {
	req.Scaler = w.c
	req.CPUs, req.MemoryBytes = sized(w.c)
	return w.b.Spawn(ctx, req)
}

// sized is the size the manager gives an agent of c started for a job
// that states no resources.
func sized(c scaler.Config) (float64, int64) {
	g := c.AgentSize(kilnci.Resources{})
	return float64(g.MilliCPUs) / 1000, g.Memory
}

func spawnErr(t *testing.T, fc *scaler.Firecracker, c scaler.Config) error {
	t.Helper()
	var events []string
	cpus, mem := sized(c)
	inst, err := fc.Spawn(context.Background(), scaler.SpawnRequest{AgentID: "scaler-firecracker-0a0b0c0d", Labels: []string{"vm"},
		ServerURL: "http://127.0.0.1:9", Token: "kat_x", Scaler: c, CPUs: cpus, MemoryBytes: mem,
		Event: func(typ, d string) { events = append(events, typ+" "+d) }})
	if err == nil {
		_ = inst.Destroy(context.Background(), "shutdown")
		t.Fatalf("the spawn succeeded; events %v", events)
	}
	if left, _ := os.ReadDir(fc.StateRoot); len(left) != 0 {
		t.Fatalf("left behind in the state root: %v", left)
	}
	return err
}

// A VMM whose API socket does not answer within socket_wait fails the
// spawn naming socket_wait; one that exits at start fails it with its
// output; a configuration the API refuses fails it with Firecracker's
// fault message. Nothing is left behind.
// Proves B194 (docs/behaviours.md).
func TestFirecrackerSocketWaitAndFailures(t *testing.T) {
	fc, c := fakeFirecracker(t, "KILN_FAKE_FC_DELAY=3s")
	c.SocketWait = 300 * time.Millisecond
	if err := spawnErr(t, fc, c); !strings.Contains(err.Error(), "did not answer within socket_wait (300ms)") {
		t.Fatalf("a slow socket: %v", err)
	}
	fc, c = fakeFirecracker(t, "KILN_FAKE_FC_EXIT=Failed to load the kernel: bad ELF magic")
	if err := spawnErr(t, fc, c); !strings.Contains(err.Error(), "exited before its API socket") ||
		!strings.Contains(err.Error(), "--- captured output (last 50 lines) ---\nFailed to load the kernel: bad ELF magic") {
		t.Fatalf("a VMM exiting at start: %v", err)
	}
	fc, c = fakeFirecracker(t)
	c.Kernel = filepath.Join(t.TempDir(), "missing-vmlinux")
	if err := spawnErr(t, fc, c); !strings.Contains(err.Error(), "PUT /boot-source: 400 Bad Request: The kernel file cannot be opened") {
		t.Fatalf("a missing kernel: %v", err)
	}
	fc, c = fakeFirecracker(t)
	c.VCPUs = 64
	c.SocketWait = 0 // the default
	if err := spawnErr(t, fc, c); !strings.Contains(err.Error(), "PUT /machine-config: 400 Bad Request") {
		t.Fatalf("a vcpu count Firecracker refuses: %v", err)
	}
}
