package scaler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The address the microvm guest dials: QEMU's user-mode network forwards
// it (guestfwd) to the server, and nothing else is reachable (restrict=on).
const (
	microVMServerHost = "10.0.2.100"
	microVMServerPort = "80"
)

// MicroVM is the microvm backend: each agent is a QEMU `microvm` machine
// (B195) booting the scaler's kernel and initramfs (BuildInitramfs) with
// the agent's settings in a small archive appended to it; KVM where the
// host has working hardware virtualization, TCG otherwise (accel: kvm, tcg
// or auto). Its only network is QEMU's user mode, restricted, with one
// guestfwd to the server's address: the server must already listen when
// QEMU starts. Destroy sends SIGTERM, then SIGKILL.
type MicroVM struct {
	// QEMU is the emulator (default qemu-system-x86_64 on PATH).
	QEMU string
	// StateRoot holds each VM's directory (its initramfs; removed with it).
	StateRoot string
	// Relay is a static busybox whose nc joins each guest connection to
	// the server (QEMU runs it per connection; default /bin/busybox when
	// it is there). Without one the guestfwd is a single chardev
	// connection: the agent's first, and no reconnect.
	Relay     string
	KillAfter time.Duration
}

// Accel resolves accel: auto is kvm when /dev/kvm is there and the CPU
// has hardware virtualization (vmx or svm), else tcg.
func Accel(want string) string {
	if want == "kvm" || want == "tcg" {
		return want
	}
	if _, err := os.Stat("/dev/kvm"); err == nil {
		if b, err := os.ReadFile("/proc/cpuinfo"); err == nil && (bytes.Contains(b, []byte(" vmx")) || bytes.Contains(b, []byte(" svm"))) {
			return "kvm"
		}
	}
	return "tcg"
}

// Spawn starts the VM.
func (v *MicroVM) Spawn(ctx context.Context, req SpawnRequest) (Instance, error) {
	c := req.Scaler
	u, err := url.Parse(req.ServerURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("microvm: server_url %q has no host", req.ServerURL)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "ws": "80", "https": "443", "wss": "443"}[u.Scheme]
	}
	guestURL := *u
	guestURL.Host = microVMServerHost + ":" + microVMServerPort
	if u.Scheme == "https" || u.Scheme == "wss" {
		guestURL.Host = microVMServerHost + ":443"
	}
	accel := Accel(c.Accel)
	root := v.StateRoot
	if root == "" {
		root = os.TempDir()
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(root, req.AgentID+"-")
	if err != nil {
		return nil, err
	}
	req.Event(EventProvisioning, fmt.Sprintf("preparing the micro-VM (%s): kernel %s, initramfs %s", accel, c.Kernel, c.Initrd))
	initrd := filepath.Join(dir, "initrd")
	env := map[string]string{"KILN_AGENT_SERVER": guestURL.String(), "KILN_AGENT_ID": req.AgentID,
		"KILN_AGENT_LABELS": strings.Join(req.Labels, ","), "KILN_AGENT_TOKEN": req.Token,
		"KILN_MICROVM_ACCEL": accel, "KILN_MICROVM_HOSTNAME": "microvm-" + accel}
	if err := perVMInitrd(initrd, c.Initrd, env); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("microvm: %v", err)
	}
	// The manager resolved the size (B197): the job's resources, else
	// the scaler's vcpus and memory, else its default_resources.
	vcpus := max(1, int(math.Ceil(req.CPUs)))
	mib := int64(512)
	if req.MemoryBytes > 0 {
		mib = max(1, req.MemoryBytes>>20)
	}
	// TCG: the PIT, PIC and RTC are emulated, and the kernel is told the
	// TSC's rate and the delay loop's, which it cannot calibrate on a
	// loaded host (it hangs there otherwise).
	machine, cpu, kargs := "microvm,pit=on,pic=on,rtc=on", "max", "console=ttyS0 panic=-1 reboot=t quiet tsc_early_khz=2000000 lpj=4000000 no_timer_check"
	if accel == "kvm" {
		machine, cpu, kargs = "microvm", "host", "console=ttyS0 panic=-1 reboot=t quiet"
	}
	fwd := net.JoinHostPort(host, port)
	target := "tcp:" + fwd
	relay := v.Relay
	if relay == "" {
		if _, err := os.Stat("/bin/busybox"); err == nil {
			relay = "/bin/busybox"
		}
	}
	if relay != "" {
		target = "cmd:" + relay + " nc " + host + " " + port
	}
	args := []string{"-M", machine, "-accel", accel, "-cpu", cpu,
		"-m", strconv.FormatInt(mib, 10), "-smp", strconv.Itoa(vcpus),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-serial", "stdio",
		"-kernel", c.Kernel, "-initrd", initrd, "-append", kargs,
		"-netdev", "user,id=n0,restrict=on,guestfwd=tcp:" + guestURL.Host + "-" + target,
		"-device", "virtio-net-device,netdev=n0"}
	qemu := v.QEMU
	if qemu == "" {
		qemu = "qemu-system-x86_64"
	}
	cmd := exec.Command(qemu, args...)
	cmd.Dir = dir
	capture := &Capture{}
	cmd.Stdout, cmd.Stderr = capture, capture
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	req.Event(EventNetwork, "QEMU user-mode network, restricted; the guest reaches "+fwd+" as "+guestURL.Host)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, errors.New(WithTail("microvm: "+err.Error(), capture.Tail()))
	}
	vm := &qemuInstance{group: watch(cmd, capture, v.KillAfter), dir: dir}
	req.Event(EventReady, fmt.Sprintf("micro-VM started (QEMU PID %d, accel %s, %d vCPU, %d MiB)", cmd.Process.Pid, accel, vcpus, mib))
	return vm, nil
}

// perVMInitrd is the scaler's initramfs with a newc archive holding
// /kiln.env appended (the kernel unpacks concatenated archives in order);
// the file is the VM's own, 0600.
func perVMInitrd(path, base string, env map[string]string) error {
	in, err := os.Open(base)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, in)
	if err == nil && n%4 != 0 {
		_, err = out.Write(make([]byte, 4-n%4))
	}
	if err != nil {
		out.Close()
		return err
	}
	var b strings.Builder
	for _, k := range []string{"KILN_AGENT_SERVER", "KILN_AGENT_ID", "KILN_AGENT_LABELS", "KILN_AGENT_TOKEN", "KILN_MICROVM_ACCEL", "KILN_MICROVM_HOSTNAME"} {
		fmt.Fprintf(&b, "export %s='%s'\n", k, strings.ReplaceAll(env[k], "'", `'\''`))
	}
	w := newCpio(out)
	w.file("kiln.env", 0o600, []byte(b.String()))
	if err := w.close(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

type qemuInstance struct {
	*group
	dir  string
	once sync.Once
}

// Destroy stops QEMU (SIGTERM, then SIGKILL) and removes the VM's files.
func (vm *qemuInstance) Destroy(ctx context.Context, _ string) error {
	var err error
	vm.once.Do(func() {
		err = vm.stop(ctx, vm.terminate)
		_ = os.RemoveAll(vm.dir)
	})
	return err
}
