package scaler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Firecracker defaults.
const (
	DefaultSocketWait     = 30 * time.Second
	DefaultFirecrackerMiB = 512
	fcBootArgs            = "console=ttyS0 reboot=k panic=1 pci=off"
)

// Firecracker is the firecracker backend: each agent is a micro-VM of its
// own, driven through Firecracker's REST API on its unix socket (B193):
// the VMM is started with --api-sock, kiln waits for the socket to answer
// (bounded by socket_wait, B194), then PUTs /machine-config, /boot-source,
// /drives/rootfs (read-only: the guest keeps its writes in memory),
// /network-interfaces/eth0 (a TAP device made for the VM), the agent's
// settings into MMDS, and /actions InstanceStart. The guest's init reads
// MMDS (`kiln` key: server_url, agent_id, labels, token) and runs `kiln
// agent`. Removal: SendCtrlAltDel, then SIGKILL to the VMM's group.
type Firecracker struct {
	// Binary is the firecracker executable when the scaler names none
	// (default "firecracker" on PATH).
	Binary string
	// StateRoot holds each VM's directory (its API socket; removed with it).
	StateRoot string
	// Env is the VMM's environment (default: this process's without KILN_
	// variables).
	Env []string
	// KillAfter is how long Destroy waits after SendCtrlAltDel (default 5s).
	KillAfter time.Duration
	// Tap makes the VM's TAP device and returns its removal (default: `ip
	// tuntap add`, which needs CAP_NET_ADMIN).
	Tap func(ctx context.Context, name string) (func(), error)
}

// MMDS is what the guest finds under the `kiln` key of Firecracker's
// metadata service.
type MMDS struct {
	ServerURL string `json:"server_url"`
	AgentID   string `json:"agent_id"`
	Labels    string `json:"labels"`
	Token     string `json:"token"`
}

// Spawn boots the micro-VM.
func (f *Firecracker) Spawn(ctx context.Context, req SpawnRequest) (Instance, error) {
	c := req.Scaler
	bin := c.FirecrackerBinary
	if bin == "" {
		bin = f.Binary
	}
	if bin == "" {
		bin = "firecracker"
	}
	root := f.StateRoot
	if root == "" {
		root = os.TempDir()
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	// A short directory name: a unix socket path is at most 108 bytes.
	dir, err := os.MkdirTemp(root, "fc-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (Instance, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	req.Event(EventProvisioning, fmt.Sprintf("preparing the micro-VM: kernel %s, rootfs %s", c.Kernel, c.Rootfs))
	tap := "kf" + tail8(req.AgentID)
	req.Event(EventNetwork, "configuring TAP device "+tap)
	mkTap := f.Tap
	if mkTap == nil {
		mkTap = ipTuntap
	}
	untap, err := mkTap(ctx, tap)
	if err != nil {
		return fail(fmt.Errorf("firecracker: the TAP device %s: %v", tap, err))
	}
	sock := filepath.Join(dir, "api.sock")
	cmd := exec.Command(bin, "--api-sock", sock, "--id", req.AgentID)
	cmd.Dir = dir
	cmd.Env = f.Env
	if cmd.Env == nil {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "KILN_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
	}
	capture := &Capture{}
	cmd.Stdout, cmd.Stderr = capture, capture
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	req.Event(EventProvisioning, "starting "+filepath.Base(bin)+" --api-sock "+sock)
	if err := cmd.Start(); err != nil {
		untap()
		return fail(errors.New(WithTail("firecracker: "+err.Error(), capture.Tail())))
	}
	vm := &fcInstance{group: watch(cmd, capture, f.KillAfter), dir: dir, untap: untap, api: newFCClient(sock)}
	wait := c.SocketWait
	if wait <= 0 {
		wait = DefaultSocketWait
	}
	if err := vm.configure(ctx, req, wait, tap); err != nil {
		_ = vm.Destroy(context.WithoutCancel(ctx), "spawn-failed")
		return nil, errors.New(WithTail("firecracker: "+err.Error(), capture.Tail()))
	}
	req.Event(EventReady, fmt.Sprintf("micro-VM booted (Firecracker PID %d)", cmd.Process.Pid))
	return vm, nil
}

// configure waits for the API socket and boots the VM through it.
func (vm *fcInstance) configure(ctx context.Context, req SpawnRequest, wait time.Duration, tap string) error {
	c := req.Scaler
	if err := vm.api.waitReady(ctx, wait, vm.exited); err != nil {
		return err
	}
	// The manager resolved the size (B197): the job's resources, else
	// the scaler's vcpus and memory, else its default_resources.
	vcpus := max(1, int(math.Ceil(req.CPUs)))
	mib := int64(DefaultFirecrackerMiB)
	if req.MemoryBytes > 0 {
		mib = max(1, req.MemoryBytes>>20)
	}
	boot := map[string]any{"kernel_image_path": c.Kernel, "boot_args": fcBootArgs}
	if c.Initrd != "" {
		boot["initrd_path"] = c.Initrd
	}
	steps := []struct {
		path string
		body any
	}{
		{"/machine-config", map[string]any{"vcpu_count": vcpus, "mem_size_mib": mib, "smt": false}},
		{"/boot-source", boot},
		{"/drives/rootfs", map[string]any{"drive_id": "rootfs", "path_on_host": c.Rootfs, "is_root_device": true, "is_read_only": true}},
		{"/network-interfaces/eth0", map[string]any{"iface_id": "eth0", "host_dev_name": tap, "guest_mac": guestMAC(req.AgentID)}},
		{"/mmds/config", map[string]any{"version": "V2", "network_interfaces": []string{"eth0"}}},
		{"/mmds", map[string]any{"kiln": MMDS{ServerURL: req.ServerURL, AgentID: req.AgentID,
			Labels: strings.Join(req.Labels, ","), Token: req.Token}}},
	}
	for _, s := range steps {
		if err := vm.api.put(ctx, s.path, s.body); err != nil {
			return err
		}
	}
	req.Event(EventProvisioning, "booting the micro-VM")
	return vm.api.put(ctx, "/actions", map[string]string{"action_type": "InstanceStart"})
}

// tail8 is the last 8 characters of an agent id (its random part).
func tail8(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}

// guestMAC is a locally administered MAC from the agent id's random part.
func guestMAC(id string) string {
	h := tail8(id)
	for len(h) < 8 {
		h = "0" + h
	}
	return "06:00:" + h[0:2] + ":" + h[2:4] + ":" + h[4:6] + ":" + h[6:8]
}

// ipTuntap makes a TAP device with ip(8).
func ipTuntap(ctx context.Context, name string) (func(), error) {
	run := func(args ...string) error {
		out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s (kiln needs CAP_NET_ADMIN to make TAP devices)", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := run("tuntap", "add", "dev", name, "mode", "tap"); err != nil {
		return nil, err
	}
	if err := run("link", "set", name, "up"); err != nil {
		_ = exec.Command("ip", "link", "del", name).Run()
		return nil, err
	}
	return func() { _ = exec.Command("ip", "link", "del", name).Run() }, nil
}

type fcInstance struct {
	*group
	dir   string
	untap func()
	api   *fcClient
	once  sync.Once
}

// Destroy asks the guest to stop (SendCtrlAltDel), kills the VMM's group
// after killAfter, and removes the TAP device and the VM's directory.
func (vm *fcInstance) Destroy(ctx context.Context, _ string) error {
	var err error
	vm.once.Do(func() {
		err = vm.stop(ctx, func() {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = vm.api.put(actx, "/actions", map[string]string{"action_type": "SendCtrlAltDel"})
			cancel()
		})
		vm.untap()
		_ = os.RemoveAll(vm.dir)
	})
	return err
}
