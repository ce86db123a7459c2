package scaler_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/agentimage"
	"github.com/kilnci/kiln/internal/scaler/scalertest"
)

// microVMKernel finds Debian's linux-image-cloud-amd64 unpacked (dpkg-deb
// -x) under $KILN_TEST_MICROVM_KERNEL, default
// ~/.cache/kiln-tools/microvm/pkg; "" when it is not there.
func microVMKernel() (kernel, modules string) {
	dir := os.Getenv("KILN_TEST_MICROVM_KERNEL")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "kiln-tools", "microvm", "pkg")
	}
	ks, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*-cloud-amd64"))
	mods, _ := filepath.Glob(filepath.Join(dir, "lib", "modules", "*-cloud-amd64"))
	if len(ks) == 0 || len(mods) == 0 {
		return "", ""
	}
	return ks[0], mods[0]
}

// The microvm backend passes the conformance suite with one real boot: a
// QEMU microvm machine (accel auto: TCG where /dev/kvm cannot boot a
// guest) of Debian's cloud kernel and an initramfs kiln builds (static
// busybox, a static kiln, the virtio modules), whose agent reaches the
// test's orchestrator through QEMU's restricted user-mode network
// (guestfwd). Skipped, loudly, where QEMU, the kernel or busybox is
// missing.
// Proves B195 (docs/behaviours.md).
func TestMicroVMBackendConformance(t *testing.T) {
	// CI sets KILN_TEST_MICROVM_REQUIRED=1 (.ci/run installs QEMU and
	// fetches the kernel): there a missing piece fails the test instead
	// of skipping it unseen.
	skip := func(msg string) {
		t.Helper()
		if os.Getenv("KILN_TEST_MICROVM_REQUIRED") == "1" {
			t.Fatal(msg + " (KILN_TEST_MICROVM_REQUIRED=1)")
		}
		t.Skip("SKIPPED: " + msg)
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
	}
	kernel, modules := microVMKernel()
	if kernel == "" {
		skip("no Debian cloud kernel unpacked (scripts/microvm-kernel fetches it into ~/.cache/kiln-tools/microvm/pkg)")
	}
	busybox := "/bin/busybox"
	if !agentimage.StaticELF(busybox) {
		skip("/bin/busybox is not a static busybox (apt-get install busybox-static)")
	}
	dir := t.TempDir()
	static := filepath.Join(dir, "kiln")
	build := exec.Command("go", "build", "-o", static, "../../cmd/kiln")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a static kiln: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	if err := scaler.BuildInitramfs(initrd, scaler.InitramfsSpec{Busybox: busybox, Kiln: static, ModulesDir: modules}); err != nil {
		t.Fatal(err)
	}
	c := scaler.Config{Name: "vms", Type: "microvm", Kernel: kernel, Initrd: initrd, VCPUs: 1, Memory: "512m", Accel: "auto"}
	t.Logf("accel %s", scaler.Accel("auto"))
	old := scalertest.Timeout
	scalertest.Timeout = 4 * time.Minute
	defer func() { scalertest.Timeout = old }()
	scalertest.Run(t, func(t *testing.T) scaler.Backend {
		return withConfig{&scaler.MicroVM{QEMU: qemu, StateRoot: t.TempDir()}, c}
	})
}
