package scaler

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// MicroVMModules are the kernel modules the microvm guest loads, in this
// order: Debian's cloud kernel has virtio as modules.
var MicroVMModules = []string{"virtio_ring", "virtio", "virtio_mmio", "failover", "net_failover", "virtio_net"}

// InitramfsSpec is what BuildInitramfs puts into a microvm guest's
// initramfs.
type InitramfsSpec struct {
	Busybox string // a static busybox (Debian's busybox-static: /bin/busybox)
	Kiln    string // a static kiln binary (CGO_ENABLED=0)
	// ModulesDir holds <name>.ko for each of MicroVMModules (found below
	// it, as in lib/modules/<version>/kernel/…).
	ModulesDir string
	// Rootfs is a tar of more files (the docker agent image's root
	// filesystem: git with its libraries, CA certificates, /etc/passwd),
	// unpacked first; nil for none.
	Rootfs io.Reader
}

// microVMInit is the guest's /init: mount, load the virtio modules, bring
// up QEMU user-mode networking, read the agent's settings from /kiln.env
// (the per-VM archive appended to the initramfs) and run one agent; power
// off when it exits.
const microVMInit = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
for m in ` + "$(cat /lib/modules/order)" + `; do insmod /lib/modules/$m.ko || echo "kiln-microvm: insmod $m failed"; done
. /kiln.env
hostname "$KILN_MICROVM_HOSTNAME"
ip link set lo up
ip addr add 10.0.2.15/24 dev eth0
ip link set eth0 up
ip route add default via 10.0.2.2
echo "kiln-microvm: starting agent $KILN_AGENT_ID (accel $KILN_MICROVM_ACCEL)"
/bin/kiln agent --max-jobs 1 --state-dir /tmp/agent --isolation off --log-format json
echo "kiln-microvm: the agent exited ($?)"
poweroff -f
`

// BuildInitramfs writes a newc cpio archive — the guest's initramfs — to
// path: busybox, kiln, the virtio modules and /init.
func BuildInitramfs(path string, spec InitramfsSpec) error {
	mods := map[string]string{}
	err := filepath.WalkDir(spec.ModulesDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := strings.TrimSuffix(d.Name(), ".ko")
		if name != d.Name() {
			mods[name] = p
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("initramfs: the modules: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := newCpio(f)
	if spec.Rootfs != nil {
		w.untar(spec.Rootfs)
	}
	for _, d := range []string{"bin", "usr", "usr/bin", "dev", "proc", "sys", "tmp", "root", "lib", "lib/modules", "etc"} {
		w.dir(d)
	}
	w.file("init", 0o755, []byte(microVMInit))
	w.file("lib/modules/order", 0o644, []byte(strings.Join(MicroVMModules, " ")))
	w.copy("bin/busybox", 0o755, spec.Busybox)
	if spec.Rootfs != nil {
		w.symlink("bin/kiln", "/usr/local/bin/kiln") // the root filesystem has it
	} else {
		w.copy("bin/kiln", 0o755, spec.Kiln)
	}
	for _, m := range MicroVMModules {
		if mods[m] == "" {
			w.err = fmt.Errorf("initramfs: module %s.ko is not under %s", m, spec.ModulesDir)
			break
		}
		w.copy("lib/modules/"+m+".ko", 0o644, mods[m])
	}
	if err := w.close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpio writes a newc archive; the first error sticks.
type cpio struct {
	w   *bufio.Writer
	n   int64
	ino int
	err error
}

func newCpio(w io.Writer) *cpio { return &cpio{w: bufio.NewWriter(w), ino: 1} }

func (c *cpio) write(b []byte) {
	if c.err != nil {
		return
	}
	var n int
	n, c.err = c.w.Write(b)
	c.n += int64(n)
}

func (c *cpio) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpio) header(name string, mode uint32, size int) {
	c.ino++
	nlink := 1
	if mode&0o040000 != 0 {
		nlink = 2
	}
	c.write(fmt.Appendf(nil, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0))
	c.write(append([]byte(name), 0))
	c.pad()
}

func (c *cpio) dir(name string) { c.header(name, 0o040755, 0) }

func (c *cpio) file(name string, perm uint32, data []byte) {
	c.header(name, 0o100000|perm, len(data))
	c.write(data)
	c.pad()
}

func (c *cpio) copy(name string, perm uint32, host string) {
	if c.err != nil {
		return
	}
	data, err := os.ReadFile(host)
	if err != nil {
		c.err = fmt.Errorf("initramfs: %w", err)
		return
	}
	c.file(name, perm, data)
}

func (c *cpio) symlink(name, target string) {
	c.header(name, 0o120777, len(target))
	c.write([]byte(target))
	c.pad()
}

// untar adds a tar's directories, files and symlinks.
func (c *cpio) untar(r io.Reader) {
	tr := tar.NewReader(r)
	for c.err == nil {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			c.err = fmt.Errorf("initramfs: the root filesystem: %w", err)
			return
		}
		name := strings.Trim(path.Clean("/"+h.Name), "/")
		if name == "" {
			continue
		}
		perm := uint32(h.Mode) & 0o7777
		switch h.Typeflag {
		case tar.TypeDir:
			c.header(name, 0o040000|perm, 0)
		case tar.TypeSymlink:
			c.symlink(name, h.Linkname)
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				c.err = err
				return
			}
			c.file(name, perm, data)
		}
	}
}

func (c *cpio) close() error {
	c.header("TRAILER!!!", 0, 0)
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}
