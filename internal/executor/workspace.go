package executor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// workspace is one job's directory under Config.WorkRoot:
//
//	job-<id>-<random>/      0700, owned by whoever runs the steps
//	  ws/                   the checkout; $KILN_WORKSPACE and the default working directory
//	  tmp/                  $KILN_TEMP
//	  meta/                 step scripts, $KILN_ENV/$KILN_PATH/$KILN_OUTPUT files, git credentials
//
// A step may rename or replace anything in it, meta included; the executor
// therefore makes and reads meta's files only through a handle on the meta
// directory it created (metaDir), so a symlink or a directory swapped in
// cannot lead its writes or reads elsewhere. With a step user, meta is the
// agent's (0711): the step cannot add or remove its files, only use the
// ones made for it.
type workspace struct {
	root, dir, tmp, meta string
	metaDir              *os.Root
	lock                 *os.File // held while root exists (leftovers.go)
	owner                *User    // the step user, or nil
}

func newWorkspace(workRoot, jobID string, owner *User) (*workspace, error) {
	root, lock, err := claimJobDir(workRoot, jobID)
	if err != nil {
		return nil, fmt.Errorf("create the job directory: %w", err)
	}
	w := &workspace{
		root:  root,
		lock:  lock,
		dir:   filepath.Join(root, "ws"),
		tmp:   filepath.Join(root, "tmp"),
		meta:  filepath.Join(root, "meta"),
		owner: owner,
	}
	fail := func(err error) (*workspace, error) {
		if w.metaDir != nil {
			w.metaDir.Close()
		}
		if removeTree(root) == nil {
			releaseJobDir(lock)
		} else {
			lock.Close()
		}
		return nil, fmt.Errorf("create the job directory: %w", err)
	}
	metaMode := os.FileMode(0o700)
	if owner != nil {
		metaMode = 0o711
	}
	for _, d := range []string{w.dir, w.tmp, w.meta} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(w.meta, metaMode); err != nil {
		return fail(err)
	}
	if owner != nil {
		// Nothing of the job has run yet, so these are the directories
		// just made.
		for _, d := range []string{root, w.dir, w.tmp} {
			if err := os.Lchown(d, int(owner.UID), int(owner.GID)); err != nil {
				return fail(err)
			}
		}
	}
	if w.metaDir, err = os.OpenRoot(w.meta); err != nil {
		return fail(err)
	}
	return w, nil
}

// writeMeta makes the file name in meta holding data, owned by the step
// user if there is one, and returns its path. Whatever has that name is
// removed first (a step may have put a symlink there).
func (w *workspace) writeMeta(name string, data []byte, perm os.FileMode) (string, error) {
	if err := w.metaDir.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	f, err := w.metaDir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return "", err
	}
	if w.owner != nil {
		if err := f.Chown(int(w.owner.UID), int(w.owner.GID)); err != nil {
			f.Close()
			return "", err
		}
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return filepath.Join(w.meta, name), nil
}

// readMeta reads the file name in meta, of at most limit bytes, if it is
// still a regular file: a step may have replaced it with a FIFO (opening
// it for reading would wait for a writer forever), a device or a
// symlink. A missing file reads as empty.
func (w *workspace) readMeta(name string, limit int64) (string, error) {
	f, err := w.metaDir.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil // the step removed it: nothing to apply
	}
	if err != nil {
		return "", fmt.Errorf("it cannot be opened as a regular file (%v)", errors.Unwrap(err))
	}
	defer f.Close()
	return readRegular(f, limit)
}

// readRegular reads an open file of at most limit bytes, refusing one
// that is not a regular file.
func readRegular(f *os.File, limit int64) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("it is not a regular file but a %s", fileKind(fi.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return "", err
	}
	if int64(len(b)) > limit {
		return "", fmt.Errorf("it is larger than %s", formatBytes(limit))
	}
	return string(b), nil
}

// fileKind names a non-regular file's type.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSymlink != 0:
		return "symlink"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	case m.IsDir():
		return "directory"
	}
	return "special file"
}

// removeMeta removes the file name from meta, if it is there.
func (w *workspace) removeMeta(name string) {
	_ = w.metaDir.Remove(name)
}

// prepareWorkRoot creates the work root, or checks the one there: a
// directory (not a symlink) of this process's user, so that no other user
// can have made it to plant or swap job directories. Its mode becomes
// 0700, or 0711 when a step user must reach the job directories inside.
func prepareWorkRoot(dir string, stepUser *User) error {
	mode := os.FileMode(0o700)
	if stepUser != nil {
		mode = 0o711
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("create the work root: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("the work root: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("the work root %s is not a directory (a symlink?); choose another", dir)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("the work root %s belongs to uid %d, not to this user (uid %d): another user could control the job directories in it; choose another or remove it", dir, uid, os.Geteuid())
	}
	if fi.Mode().Perm() != mode {
		if err := os.Chmod(dir, mode); err != nil {
			return fmt.Errorf("the work root: %w", err)
		}
	}
	if stepUser != nil {
		return reachable(dir, stepUser)
	}
	return nil
}

// reachable checks that the step user may pass through every directory
// above dir (and dir itself): it must reach its job directory.
func reachable(dir string, u *User) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		uid, gid, ok := fileOwnerGroup(fi)
		perm := fi.Mode().Perm()
		if ok {
			can := perm&0o001 != 0 ||
				(uid == int(u.UID) && perm&0o100 != 0) ||
				(gid == int(u.GID) && perm&0o010 != 0)
			if !can {
				return fmt.Errorf("the step user %s cannot enter %s (mode %#o), so cannot reach the work root %s; choose a work directory it can reach", u.Name, d, perm, dir)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// fileSafe keeps a job id readable in a directory name without letting it
// name another directory.
func fileSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		if len(s) > 40 && b.Len() >= 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// stepFiles creates the empty $KILN_ENV, $KILN_PATH and $KILN_OUTPUT files
// of one attempt of a step.
func (w *workspace) stepFiles(index, attempt int) (*stepFiles, error) {
	base := fmt.Sprintf("step%d-%d-", index, attempt)
	f := &stepFiles{env: base + "env", path: base + "path", output: base + "output"}
	for _, n := range []string{f.env, f.path, f.output} {
		if _, err := w.writeMeta(n, nil, 0o600); err != nil {
			return nil, fmt.Errorf("create %s: %w", n, err)
		}
	}
	return f, nil
}

// writeScript stores a step's script in meta, where the shell reads it.
func (w *workspace) writeScript(index int, script string) (string, error) {
	p, err := w.writeMeta(fmt.Sprintf("step%d.sh", index), []byte(script), 0o700)
	if err != nil {
		return "", fmt.Errorf("write the step's script: %w", err)
	}
	return p, nil
}

// remove deletes the job directory, or with keep everything but ws. What
// it could not remove keeps its lock file, so the agent's next start
// tries again.
func (w *workspace) remove(keep bool) error {
	w.metaDir.Close()
	var err error
	if keep {
		err = errors.Join(removeTree(w.meta), removeTree(w.tmp))
	} else {
		err = removeTree(w.root)
	}
	if err == nil {
		releaseJobDir(w.lock)
	} else {
		w.lock.Close()
	}
	return err
}

// removeTree is os.RemoveAll that also removes directories a step made
// read-only (Go's module cache does that).
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
