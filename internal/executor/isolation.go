package executor

import (
	"errors"
	"fmt"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// IsolationMode says whether steps run apart from the host that runs them.
type IsolationMode string

// Isolation modes.
const (
	// IsolationOff runs steps in the agent's own view of the host: they
	// see its processes and every file its user can read (kiln run).
	IsolationOff IsolationMode = "off"
	// IsolationAuto isolates steps where the host allows it and otherwise
	// runs them as IsolationOff, saying so once in the log (kiln agent).
	IsolationAuto IsolationMode = "auto"
	// IsolationRequired refuses to start (New fails) where steps cannot be
	// isolated.
	IsolationRequired IsolationMode = "required"
)

// ParseIsolationMode reads off, auto or required ("" is off).
func ParseIsolationMode(s string) (IsolationMode, error) {
	switch m := IsolationMode(strings.TrimSpace(s)); m {
	case "":
		return IsolationOff, nil
	case IsolationOff, IsolationAuto, IsolationRequired:
		return m, nil
	}
	return "", fmt.Errorf("isolation %q is not off, auto or required", s)
}

// Isolation keeps a job's steps away from the agent and the server that
// share their host (docs/security.md). With it, each step's supervisor
// starts in new PID and mount namespaces (and a user namespace when the
// agent is not root): the step sees a /proc of its own processes only, so
// the agent and the server are neither visible nor signalable; Hide paths
// are covered (a directory by an empty read-only one, a file by an empty
// one) in a way the step cannot undo; and block devices are covered too,
// so a root step cannot read a disk under the file system. A root agent's
// steps stay root inside a user namespace that maps every user, so jobs
// that install packages keep working, but they hold no privilege over
// the host itself.
type Isolation struct {
	Mode IsolationMode // "" is IsolationOff
	// Hide are absolute paths no step may read: the agent's state
	// directory and token file, the server's data directory. A job's own
	// directory stays visible even when it lies under one of them.
	Hide []string
	// StepUser, when set, runs the checkout and the steps as this user
	// rather than the agent's; the agent must then run as root. It works
	// with or without namespaces.
	StepUser *User
}

// User is the user steps run as (Isolation.StepUser).
type User struct {
	Name     string
	UID, GID uint32
	Groups   []uint32 // supplementary groups
	Home     string
}

// LookupUser resolves a step user given as a name, a uid, or uid:gid.
func LookupUser(spec string) (*User, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, errors.New("the step user is empty")
	}
	name, gidPart, hasGID := strings.Cut(spec, ":")
	var u *user.User
	var err error
	if _, nerr := strconv.ParseUint(name, 10, 32); nerr == nil {
		u, err = user.LookupId(name)
		if err != nil {
			// A numeric id need not have an entry in /etc/passwd.
			u = &user.User{Uid: name, Gid: name, Username: name, HomeDir: "/"}
			err = nil
		}
	} else {
		u, err = user.Lookup(name)
	}
	if err != nil {
		return nil, fmt.Errorf("the step user %q: %w", spec, err)
	}
	if hasGID {
		u.Gid = gidPart
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("the step user %q has no numeric uid", spec)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("the step user's group %q is not a number", u.Gid)
	}
	if uid == 0 {
		return nil, errors.New("the step user must not be root: it is the user steps run as instead of root")
	}
	su := &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) != su.GID {
				su.Groups = append(su.Groups, uint32(n))
			}
		}
	}
	return su, nil
}

// hiddenPaths returns the paths to hide, absolute, cleaned, with symlinks
// resolved (a step that found the link would otherwise reach the target),
// in order, without those a hidden directory covers already.
func hiddenPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("hide %q: %w", p, err)
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		if abs == "/" {
			return nil, errors.New("cannot hide / from steps")
		}
		out = append(out, abs)
	}
	slices.Sort(out)
	kept := out[:0]
	for _, p := range out {
		if len(kept) == 0 || !under(p, kept[len(kept)-1]) {
			kept = append(kept, p)
		}
	}
	return kept, nil
}

// under reports whether path is dir or lies inside it.
func under(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
