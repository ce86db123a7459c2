package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/agentimage"
)

// microVMScalerConfig is the microvm half of the scaler scenario: QEMU's
// microvm machine with accel auto (KVM where it works, else TCG), booting
// the kernel given with --microvm-kernel and an initramfs built from the
// bench's own kiln binary (no git: the job does not check out).
const microVMScalerConfig = `scalers:
  - name: bench
    type: microvm
    kernel: %s
    initrd: %s
    accel: auto
    labels: [bench-microvm]
    max_agents: 1
    spawn_timeout: 2m
`

var microVMScalerWorkflows = map[string]string{
	".kiln/workflows/push.yml": `name: push
on: push
jobs:
  noop:
    runs_on: [bench-microvm]
    checkout: false
    steps:
      - run: "true"
`,
}

// microVMSpawns bounds the micro-VM boots timed: each takes seconds under
// emulation.
const microVMSpawns = 5

// scalerMicroVM measures what scaler measures with a microvm scaler. It is
// skipped, saying why, without --microvm-kernel, QEMU, a static busybox or
// a static kiln binary.
func (b *bench) scalerMicroVM(ctx context.Context) error {
	if b.cfg.MicroVMKernel == "" {
		b.progress("   microvm: skipped (give --microvm-kernel DIR: Debian's linux-image-*-cloud-amd64 unpacked with dpkg-deb -x; docs/bench.md)")
		return nil
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		b.progress("   microvm: skipped, qemu-system-x86_64 is not installed (Debian's qemu-system-x86)")
		return nil
	}
	kernel, modules, err := unpackedKernel(b.cfg.MicroVMKernel)
	if err != nil {
		return err
	}
	for _, bin := range []string{b.cfg.Binary, "/bin/busybox"} {
		if !agentimage.StaticELF(bin) {
			b.progress("   microvm: skipped, %s is not a static executable (the guest has no libraries: CGO_ENABLED=0 go build ./cmd/kiln; Debian's busybox-static)", bin)
			return nil
		}
	}
	dir, err := os.MkdirTemp("", "kiln-bench-microvm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	initrd := filepath.Join(dir, "microvm.cpio")
	spec := scaler.InitramfsSpec{Busybox: "/bin/busybox", Kiln: b.cfg.Binary, ModulesDir: modules}
	if err := scaler.BuildInitramfs(initrd, spec); err != nil {
		b.progress("   microvm: skipped, the initramfs could not be built: %v", err)
		return nil
	}
	n := min(b.cfg.Spawns, microVMSpawns)
	toSent, toRunning, err := b.timeSpawns(ctx, "microvm", fmt.Sprintf(microVMScalerConfig, kernel, initrd), microVMScalerWorkflows, n)
	if err != nil {
		return err
	}
	// The aim under emulation is 6 s; KVM has no target yet.
	accel, target := scaler.Accel("auto"), atMost(6000)
	if accel == "kvm" {
		target = nil
	}
	b.add(ScenarioScaler, fmt.Sprintf("microvm (%s): spawn → agent registered and sent its job, p50", accel), ms(percentile(toSent, 0.5)), "ms", target)
	b.add(ScenarioScaler, fmt.Sprintf("microvm (%s): spawn → agent registered and sent its job, p99", accel), ms(percentile(toSent, 0.99)), "ms", nil)
	b.add(ScenarioScaler, "webhook → job running on a fresh micro-VM, p50", ms(percentile(toRunning, 0.5)), "ms", nil)
	return nil
}

// unpackedKernel finds the kernel and its modules directory in a Debian
// kernel package unpacked with dpkg-deb -x.
func unpackedKernel(dir string) (kernel, modules string, err error) {
	ks, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*"))
	ms, _ := filepath.Glob(filepath.Join(dir, "lib", "modules", "*"))
	if len(ks) == 0 || len(ms) == 0 {
		return "", "", errors.New("--microvm-kernel " + dir + " holds no boot/vmlinuz-* and lib/modules/*: unpack Debian's linux-image-*-cloud-amd64 there with dpkg-deb -x")
	}
	return ks[0], ms[0], nil
}
