//go:build linux

package executor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// sandbox is how the executor starts each step's supervisor: the
// namespaces it is cloned into and the shim arguments that tell it what
// to set up inside them (see enterSandbox for the other side).
type sandbox struct {
	isolate bool
	// rootless: the agent is not root, so the shim gets a user namespace
	// of its own in which it is root (uid and gid are the agent's).
	rootless bool
	uid, gid int
	hide     []string
	user     *User
}

// newSandbox checks the isolation settings against this process: a step
// user needs root. Whether the kernel allows the namespaces is for
// settle to find out.
func newSandbox(iso Isolation) (*sandbox, error) {
	sb := &sandbox{uid: os.Geteuid(), gid: os.Getegid(), user: iso.StepUser}
	sb.rootless = sb.uid != 0
	if sb.user != nil && sb.rootless {
		return nil, errors.New("a step user needs the agent to run as root: only root can start processes as another user")
	}
	mode := iso.Mode
	if mode == "" {
		mode = IsolationOff
	}
	if mode == IsolationOff {
		return sb, nil
	}
	hide, err := hiddenPaths(iso.Hide)
	if err != nil {
		return nil, err
	}
	sb.isolate, sb.hide = true, hide
	return sb, nil
}

// settle probes an isolating sandbox; where the host cannot isolate steps
// it turns isolation off and returns why.
func (sb *sandbox) settle(shimPath string, env []string) error {
	if !sb.isolate {
		return nil
	}
	if err := sb.probe(shimPath, env); err != nil {
		sb.isolate, sb.hide = false, nil
		return &isolationError{err: err}
	}
	return nil
}

// isolationError says why steps cannot be isolated on this host.
type isolationError struct{ err error }

func (e *isolationError) Error() string {
	return "steps cannot be isolated on this host: " + e.err.Error()
}
func (e *isolationError) Unwrap() error { return e.err }

// probe starts one supervisor with the full setup, which runs the kiln
// binary itself as its command (it exits at once, see MaybeRunShim). It
// runs it as the agent's user: whether the step user may run the kiln
// binary is no question of isolation.
func (sb *sandbox) probe(shimPath string, env []string) error {
	probe := *sb
	probe.user = nil
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	msg := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, 4096))
		msg <- b
	}()
	p, err := startProcess(shimPath, &probe, "", nil, []string{shimPath, probeArg}, env, "/", w, w)
	w.Close()
	if err != nil {
		return err
	}
	<-p.done
	out := strings.TrimSpace(string(<-msg))
	if p.exitCode != 0 {
		if out == "" {
			out = fmt.Sprintf("the test supervisor exited with status %d", p.exitCode)
		}
		return errors.New(strings.TrimPrefix(out, "kiln: "))
	}
	return nil
}

// shimArgs are the supervisor's arguments before "--" and the command.
func (sb *sandbox) shimArgs(jobDir string) []string {
	var a []string
	if sb != nil && sb.isolate {
		a = append(a, "--isolate")
		if sb.rootless {
			a = append(a, "--rootless", fmt.Sprintf("%d:%d", sb.uid, sb.gid))
		}
		for _, h := range sb.hide {
			a = append(a, "--hide", h)
		}
		if jobDir != "" {
			a = append(a, "--job-dir", jobDir)
		}
	}
	if sb != nil && sb.user != nil {
		a = append(a, "--user", formatCred(sb.user))
	}
	return append(a, "--")
}

// attr is the supervisor's SysProcAttr: its own process group, killed
// with the agent, and the namespaces it sets up.
func (sb *sandbox) attr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{
		Setpgid:   true,       // a terminal's ^C reaches kiln, which decides
		Pdeathsig: sigKillAll, // the agent died: kill the step
	}
	if sb == nil || !sb.isolate {
		return a
	}
	a.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS
	if sb.rootless {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: sb.uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: sb.gid, Size: 1}}
	}
	return a
}

// describe is the log line's account of what steps get.
func (sb *sandbox) describe() string {
	var parts []string
	if sb.isolate {
		parts = append(parts, "steps run in their own PID, mount and user namespaces; hidden from them: "+strings.Join(append(slices.Clone(sb.hide), "block devices"), ", "))
	}
	if sb.user != nil {
		parts = append(parts, fmt.Sprintf("steps run as user %s (uid %d)", sb.user.Name, sb.user.UID))
	}
	return strings.Join(parts, "; ")
}

// formatCred is uid:gid[:group,group…] for the shim's --user.
func formatCred(u *User) string {
	s := fmt.Sprintf("%d:%d", u.UID, u.GID)
	if len(u.Groups) > 0 {
		g := make([]string, len(u.Groups))
		for i, n := range u.Groups {
			g[i] = strconv.FormatUint(uint64(n), 10)
		}
		s += ":" + strings.Join(g, ",")
	}
	return s
}

// parseCred reads formatCred's form.
func parseCred(s string) (*syscall.Credential, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fmt.Errorf("bad user %q", s)
	}
	var ids []uint32
	for _, p := range parts[:2] {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("bad user %q", s)
		}
		ids = append(ids, uint32(n))
	}
	c := &syscall.Credential{Uid: ids[0], Gid: ids[1]}
	if len(parts) == 3 && parts[2] != "" {
		for _, g := range strings.Split(parts[2], ",") {
			n, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("bad group %q", g)
			}
			c.Groups = append(c.Groups, uint32(n))
		}
	}
	if c.Groups == nil {
		c.Groups = []uint32{} // drop the agent's own groups
	}
	return c, nil
}
