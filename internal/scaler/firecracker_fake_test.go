package scaler

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// The fake Firecracker: this test binary, run with KILN_FAKE_FIRECRACKER=1
// and Firecracker's own flags (--api-sock, --id), is a VMM whose API is an
// httptest server on the unix socket speaking Firecracker's wire format
// (src/firecracker/swagger/firecracker.yaml: JSON bodies, 204, 400 with
// {"fault_message"}, unknown fields refused, pre-boot resources refused
// after InstanceStart). Its "guest" is a real `kiln agent` process
// (KILN_FAKE_FC_AGENT) started at InstanceStart with what MMDS holds under
// `kiln`; SendCtrlAltDel stops it; the VMM exits when its guest does.
// KILN_FAKE_FC_DELAY delays the socket; KILN_FAKE_FC_EXIT makes it fail
// at start like a VMM given a bad kernel.
func fakeFirecracker() int {
	fs := flag.NewFlagSet("firecracker", flag.ContinueOnError)
	sock := fs.String("api-sock", "", "")
	id := fs.String("id", "", "")
	if err := fs.Parse(os.Args[1:]); err != nil || *sock == "" {
		fmt.Fprintln(os.Stderr, "fake firecracker: --api-sock is required")
		return 2
	}
	if msg := os.Getenv("KILN_FAKE_FC_EXIT"); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		return 1
	}
	if d, err := time.ParseDuration(os.Getenv("KILN_FAKE_FC_DELAY")); err == nil {
		time.Sleep(d) // a slow VMM, as the socket wait must bear
	}
	l, err := net.Listen("unix", *sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	vm := &fakeVM{id: *id, done: make(chan struct{})}
	srv := httptest.NewUnstartedServer(vm)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-vm.done:
	case <-sigs:
		vm.stop()
	}
	return 0
}

type fakeVM struct {
	id      string
	mu      sync.Mutex
	started bool
	machine map[string]any
	boot    map[string]any
	drives  map[string]map[string]any
	ifaces  map[string]map[string]any
	mmds    map[string]json.RawMessage
	guest   *exec.Cmd
	done    chan struct{}
	once    sync.Once
}

func fault(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"fault_message": fmt.Sprintf(format, args...)})
}

// decodeStrict decodes a body into a map, refusing keys the schema does
// not have (Firecracker's serde deny_unknown_fields) and missing required
// keys.
func decodeStrict(r *http.Request, allowed, required []string) (map[string]any, error) {
	var m map[string]any
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("An error occurred when deserializing the json body of a request: %v", err)
	}
	for k := range m {
		ok := false
		for _, a := range allowed {
			ok = ok || a == k
		}
		if !ok {
			return nil, fmt.Errorf("unknown field `%s`", k)
		}
	}
	for _, k := range required {
		if _, ok := m[k]; !ok {
			return nil, fmt.Errorf("missing field `%s`", k)
		}
	}
	return m, nil
}

func (vm *fakeVM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if r.Method == http.MethodGet && r.URL.Path == "/" {
		state := "Not started"
		if vm.started {
			state = "Running"
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"id": vm.id, "state": state, "vmm_version": "1.17.0-fake", "app_name": "Firecracker"})
		return
	}
	if r.Method != http.MethodPut {
		fault(w, http.StatusBadRequest, "Invalid request method and/or path: %s %s.", r.Method, r.URL.Path)
		return
	}
	if r.Header.Get("Content-Type") != "application/json" {
		fault(w, http.StatusBadRequest, "Content-Type must be application/json")
		return
	}
	if p := r.URL.Path; vm.started && p != "/actions" && p != "/mmds" {
		fault(w, http.StatusBadRequest, "The requested operation is not supported after starting the microVM.")
		return
	}
	var (
		m   map[string]any
		err error
	)
	switch p := r.URL.Path; {
	case p == "/machine-config":
		if m, err = decodeStrict(r, []string{"vcpu_count", "mem_size_mib", "smt", "cpu_template", "track_dirty_pages", "huge_pages"},
			[]string{"vcpu_count", "mem_size_mib"}); err == nil {
			n, _ := m["vcpu_count"].(json.Number).Int64()
			if n < 1 || n > 32 {
				fault(w, http.StatusBadRequest, "The vCPU number is invalid! The vCPU number can only be 1 or an even number when SMT is enabled.")
				return
			}
			vm.machine = m
		}
	case p == "/boot-source":
		if m, err = decodeStrict(r, []string{"kernel_image_path", "initrd_path", "boot_args"}, []string{"kernel_image_path"}); err == nil {
			if _, serr := os.Stat(m["kernel_image_path"].(string)); serr != nil {
				fault(w, http.StatusBadRequest, "The kernel file cannot be opened: %v", serr)
				return
			}
			vm.boot = m
		}
	case len(p) > len("/drives/") && p[:len("/drives/")] == "/drives/":
		if m, err = decodeStrict(r, []string{"drive_id", "partuuid", "is_root_device", "cache_type", "is_read_only", "path_on_host", "rate_limiter", "io_engine", "socket"},
			[]string{"drive_id", "is_root_device"}); err == nil {
			if m["drive_id"] != p[len("/drives/"):] {
				fault(w, http.StatusBadRequest, "The id from the path does not match the id from the body!")
				return
			}
			if vm.drives == nil {
				vm.drives = map[string]map[string]any{}
			}
			vm.drives[m["drive_id"].(string)] = m
		}
	case len(p) > len("/network-interfaces/") && p[:len("/network-interfaces/")] == "/network-interfaces/":
		if m, err = decodeStrict(r, []string{"iface_id", "guest_mac", "host_dev_name", "mtu", "rx_rate_limiter", "tx_rate_limiter"},
			[]string{"iface_id", "host_dev_name"}); err == nil {
			if vm.ifaces == nil {
				vm.ifaces = map[string]map[string]any{}
			}
			vm.ifaces[m["iface_id"].(string)] = m
		}
	case p == "/mmds/config":
		if m, err = decodeStrict(r, []string{"version", "network_interfaces", "ipv4_address", "imds_compat"}, []string{"network_interfaces"}); err == nil {
			for _, i := range m["network_interfaces"].([]any) {
				if vm.ifaces[i.(string)] == nil {
					fault(w, http.StatusBadRequest, "The list of network interface IDs provided contains at least one ID that does not correspond to any existing network interface.")
					return
				}
			}
		}
	case p == "/mmds":
		err = json.NewDecoder(r.Body).Decode(&vm.mmds)
	case p == "/actions":
		if m, err = decodeStrict(r, []string{"action_type"}, []string{"action_type"}); err == nil {
			switch m["action_type"] {
			case "InstanceStart":
				if vm.started {
					fault(w, http.StatusBadRequest, "The requested operation is not supported after starting the microVM.")
					return
				}
				if vm.boot == nil || vm.drives["rootfs"] == nil {
					fault(w, http.StatusBadRequest, "Cannot start microvm without kernel configuration.")
					return
				}
				if err := vm.startGuest(); err != nil {
					fault(w, http.StatusBadRequest, "Start microvm error: %v", err)
					return
				}
			case "SendCtrlAltDel":
				if vm.guest != nil {
					_ = vm.guest.Process.Signal(syscall.SIGTERM)
				}
			case "FlushMetrics":
			default:
				err = fmt.Errorf("unknown variant `%v`", m["action_type"])
			}
		}
	default:
		fault(w, http.StatusBadRequest, "Invalid request method and/or path: %s %s.", r.Method, r.URL.Path)
		return
	}
	if err != nil {
		fault(w, http.StatusBadRequest, "%v", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// startGuest "boots": a real kiln agent with the MMDS settings.
func (vm *fakeVM) startGuest() error {
	var cfg MMDS
	if err := json.Unmarshal(vm.mmds["kiln"], &cfg); err != nil {
		return fmt.Errorf("the guest found no kiln settings in MMDS: %v", err)
	}
	state, err := os.MkdirTemp("", "fake-fc-guest-")
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Getenv("KILN_FAKE_FC_AGENT"), "agent", "--server", cfg.ServerURL, "--id", cfg.AgentID,
		"--labels", cfg.Labels, "--max-jobs", "1", "--state-dir", state, "--log-format", "json")
	cmd.Env = append(os.Environ(), "KILN_AGENT_TOKEN="+cfg.Token, "KILN_FAKE_FIRECRACKER=")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	vm.guest, vm.started = cmd, true
	go func() {
		_ = cmd.Wait()
		_ = os.RemoveAll(state)
		vm.once.Do(func() { close(vm.done) })
	}()
	return nil
}

func (vm *fakeVM) stop() {
	vm.mu.Lock()
	g := vm.guest
	vm.mu.Unlock()
	if g != nil {
		_ = g.Process.Signal(syscall.SIGTERM)
		t := time.AfterFunc(5*time.Second, func() { _ = g.Process.Kill() })
		<-vm.done
		t.Stop()
	}
}
