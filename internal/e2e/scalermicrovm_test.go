package e2e

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/agentimage"
	"github.com/kilnci/kiln/internal/server"
)

// staticELF reports whether an executable is statically linked (an ELF
// file without an interpreter): `file` may not be installed.
func staticELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return !slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
}

// A server with a microvm scaler runs a push's job in a real micro-VM
// (one boot; TCG where /dev/kvm cannot boot a guest): the guest's agent
// reaches the server through QEMU's restricted user-mode network, runs the
// step (with the git of its initramfs) and registered with the host name
// saying which accelerator ran. The guest reaches only the server, so the
// job does not check out (the repository here is a path on the host). Skipped, loudly, where QEMU, Debian's cloud
// kernel ($KILN_TEST_MICROVM_KERNEL, default ~/.cache/kiln-tools/microvm/pkg) or a static
// busybox is missing.
// Not parallel: under TCG, QEMU keeps a core busy for the whole boot, and
// the other tests' agents, starved beside it, missed heartbeats for 5–15 s
// and lost their jobs (TestWarmPoolAgentTakesTheJobAndIsReplaced, reproduced
// by running the two together). A test that does not call t.Parallel runs
// before the parallel ones start, alone.
// Proves B195 (docs/behaviours.md).
func TestMicroVMScalerRunsAJobInAVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("SKIPPED: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
	}
	pkg := os.Getenv("KILN_TEST_MICROVM_KERNEL") // scripts/test sets it (scripts/microvm-kernel)
	if pkg == "" {
		home, _ := os.UserHomeDir()
		pkg = filepath.Join(home, ".cache", "kiln-tools", "microvm", "pkg")
	}
	kernels, _ := filepath.Glob(filepath.Join(pkg, "boot", "vmlinuz-*-cloud-amd64"))
	mods, _ := filepath.Glob(filepath.Join(pkg, "lib", "modules", "*-cloud-amd64"))
	if len(kernels) == 0 || len(mods) == 0 {
		t.Skip("SKIPPED: no Debian cloud kernel unpacked in " + pkg)
	}
	if !staticELF("/bin/busybox") {
		t.Skip("SKIPPED: /bin/busybox is not a static busybox (apt-get install busybox-static)")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("SKIPPED: git is not installed")
	}
	dir := t.TempDir()
	static := filepath.Join(dir, "kiln")
	ctx, cancel := context.WithTimeout(bg, 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", static, "../../cmd/kiln")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a static kiln: %v\n%s", err, out)
	}
	var rootfs bytes.Buffer
	if _, err := (agentimage.Spec{Kiln: static}).Rootfs(&rootfs); err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	if err := scaler.BuildInitramfs(initrd, scaler.InitramfsSpec{Busybox: "/bin/busybox", Kiln: static, ModulesDir: mods[0], Rootfs: &rootfs}); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, func(c *server.Config) {
		c.Scalers = []scaler.Config{{Name: "vms", Type: "microvm", Labels: kiln.Labels{"vm"}, MaxAgents: 1,
			Kernel: kernels[0], Initrd: initrd, Accel: "auto", VCPUs: 1, Memory: "512m", SpawnTimeout: 5 * time.Minute}}
	})
	localRun(t, s, map[string]string{"ci": `on: push
jobs:
  one:
    runs_on: [vm]
    checkout: false
    steps:
      - run: hostname && git --version && echo "in the vm"
`})
	run := waitRun(t, s.Client, triggerOne(t, s.Client, "app").ID, 6*time.Minute)
	one := mustJob(t, run, "one")
	if run.Status != kiln.RunSuccess || !strings.HasPrefix(one.AgentID, "scaler-microvm-") {
		t.Fatalf("%s\nserver log tail:\n%s", describeRun(run), tail(s.log.String(), 60))
	}
	lines := texts(logLines(t, s.Client, run.ID, "one", nil))
	if got := strings.Join(lines, "\n"); !strings.Contains(got, "in the vm") || !strings.Contains(got, "git version") || !strings.Contains(got, "microvm-"+scaler.Accel("auto")) {
		t.Fatalf("the step's log:\n%s", got)
	}
}
