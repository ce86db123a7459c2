//go:build linux

package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const prSetDumpable = 4 // PR_SET_DUMPABLE from <linux/prctl.h>

// shimOptions are what the executor asks the supervisor to set up before
// it starts the step (sandbox.shimArgs writes them).
type shimOptions struct {
	isolate  bool
	rootless bool // in a user namespace of its own, root there, uid/gid outside
	uid, gid int
	hide     []string
	jobDir   string
	user     *syscall.Credential
	leaseFD  int // the lease file (Config.LeaseFile), open as this descriptor; 0: none
}

func parseShimArgs(args []string) (*shimOptions, []string, error) {
	o := &shimOptions{}
	for len(args) > 0 {
		flag := args[0]
		args = args[1:]
		if flag == "--" {
			if len(args) == 0 {
				return nil, nil, errors.New("started without a command")
			}
			return o, args, nil
		}
		if flag == "--isolate" {
			o.isolate = true
			continue
		}
		if len(args) == 0 {
			return nil, nil, fmt.Errorf("%s needs a value", flag)
		}
		val := args[0]
		args = args[1:]
		switch flag {
		case "--rootless":
			u, g, ok := strings.Cut(val, ":")
			uid, err1 := strconv.Atoi(u)
			gid, err2 := strconv.Atoi(g)
			if !ok || err1 != nil || err2 != nil {
				return nil, nil, fmt.Errorf("bad --rootless %q", val)
			}
			o.rootless, o.uid, o.gid = true, uid, gid
		case "--hide":
			o.hide = append(o.hide, val)
		case "--lease-fd":
			fd, err := strconv.Atoi(val)
			if err != nil || fd < 3 {
				return nil, nil, fmt.Errorf("bad --lease-fd %q", val)
			}
			o.leaseFD = fd
		case "--job-dir":
			o.jobDir = val
		case "--user":
			c, err := parseCred(val)
			if err != nil {
				return nil, nil, err
			}
			o.user = c
		default:
			return nil, nil, fmt.Errorf("unknown option %s", flag)
		}
	}
	return nil, nil, errors.New("started without a command")
}

// enterSandbox runs in the supervisor, the first process of new PID and
// mount namespaces, before it starts the step. It makes the supervisor
// undumpable (the step can neither ptrace it nor read its memory), keeps
// its mounts from reaching the host, covers the hidden paths and block
// devices, puts the job's own directory back where it was, mounts a /proc
// that shows only the step's processes, and returns to its working
// directory by name, so a directory opened before the covers cannot lead
// under them. The step starts in a further user and mount namespace
// (stepAttr): mounts made here reach it locked, so even a step that is
// root in its namespace cannot unmount a cover to see beneath.
func (o *shimOptions) enterSandbox() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return fmt.Errorf("make the supervisor undumpable: %v", errno)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("read the working directory: %w", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	var job *os.File // the job's directory, when a cover would hide it
	for _, h := range o.hide {
		if o.jobDir != "" && under(o.jobDir, h) {
			if job, err = os.OpenFile(o.jobDir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0); err != nil {
				return fmt.Errorf("open the job directory: %w", err)
			}
			defer job.Close()
			break
		}
	}
	var covers []string
	for _, h := range o.hide {
		fi, err := os.Lstat(h)
		if err != nil {
			// Gone, or under a cover already: nothing to hide. A path
			// the supervisor cannot even look at is beyond the step too.
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOTDIR) {
				continue
			}
			return fmt.Errorf("hide %s: %w", h, err)
		}
		if fi.IsDir() {
			if err := syscall.Mount("tmpfs", h, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
				return fmt.Errorf("hide %s: %w", h, err)
			}
			covers = append(covers, h)
		} else if err := coverFile(h); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
	}
	if job != nil {
		if err := os.MkdirAll(o.jobDir, 0o755); err != nil {
			return fmt.Errorf("keep the job directory: %w", err)
		}
		src := "/proc/self/fd/" + strconv.Itoa(int(job.Fd()))
		if err := syscall.Mount(src, o.jobDir, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("keep the job directory: %w", err)
		}
	}
	for _, c := range covers {
		flags := uintptr(syscall.MS_REMOUNT | syscall.MS_BIND | syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC)
		if err := syscall.Mount("", c, "", flags, ""); err != nil {
			return fmt.Errorf("make the cover of %s read-only: %w", c, err)
		}
	}
	if err := coverBlockDevices("/dev"); err != nil {
		return err
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount a /proc of the step's own: %w", err)
	}
	if err := os.Chdir(cwd); err != nil {
		return fmt.Errorf("enter the working directory: %w", err)
	}
	return nil
}

// coverFile makes a file read as empty: /dev/null is bound over it.
func coverFile(path string) error {
	return syscall.Mount("/dev/null", path, "", syscall.MS_BIND, "")
}

// coverBlockDevices covers every block device under dir with /dev/null:
// a step that may open a disk (root, or a member of the disk group) could
// otherwise read any file on it, hidden or not.
func coverBlockDevices(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: the step cannot list it either
		}
		if d.Type()&fs.ModeDevice != 0 && d.Type()&fs.ModeCharDevice == 0 {
			if err := coverFile(p); err != nil {
				return fmt.Errorf("cover the block device %s: %w", p, err)
			}
		}
		return nil
	})
}

// stepAttr is how the supervisor starts the step: in its own process
// group, and with isolation in a user and mount namespace of its own
// whose mounts are the supervisor's, locked. A root agent's step stays
// root there, over a map of every user (files keep their owners); a
// non-root agent's step keeps its user. A step user is switched to last.
func (o *shimOptions) stepAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if o.isolate {
		a.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
		if o.rootless {
			a.UidMappings = []syscall.SysProcIDMap{{ContainerID: o.uid, HostID: 0, Size: 1}}
			a.GidMappings = []syscall.SysProcIDMap{{ContainerID: o.gid, HostID: 0, Size: 1}}
		} else {
			all := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}}
			a.UidMappings, a.GidMappings = all, all
			a.GidMappingsEnableSetgroups = true
		}
	}
	a.Credential = o.user
	return a
}
