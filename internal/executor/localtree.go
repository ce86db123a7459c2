package executor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// checkoutLocal makes the workspace a copy of a local working tree as it
// is: a real git checkout of its HEAD, then every path that differs from
// HEAD (staged or not; deleted ones removed) and every untracked file that
// is not ignored copied over it.
func (e *Execution) checkoutLocal(g *gitRunner, c *Checkout, ws string) error {
	src, err := filepath.Abs(c.LocalPath)
	if err != nil {
		return err
	}
	top, err := g.output(src, "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("%s is not in a git working tree: %v", c.LocalPath, err)
	}
	top = strings.TrimSpace(top)
	head, err := g.output(top, "rev-parse", "--verify", "-q", "HEAD^{commit}")
	head = strings.TrimSpace(head)
	if err != nil || head == "" {
		head = "" // no commit yet: copy every file
	}
	if g.stop != stopNone {
		return errors.New("cancelled")
	}
	if err := g.run(ws, "init", "-q"); err != nil {
		return err
	}
	var changed, others []string
	if head != "" {
		g.log.notice("copying the working tree %s at %s", top, head)
		if err := g.run(ws, "fetch", "--no-tags", "--no-recurse-submodules", "--depth=1", top, head); err != nil {
			return err
		}
		if err := g.run(ws, "checkout", "-q", "--force", "--detach", head); err != nil {
			return err
		}
		out, err := g.output(top, "diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", "HEAD", "--")
		if err != nil {
			return err
		}
		changed = splitNUL(out)
		out, err = g.output(top, "ls-files", "-z", "--others", "--exclude-standard")
		if err != nil {
			return err
		}
		others = splitNUL(out)
	} else {
		g.log.notice("copying the working tree %s (no commit yet)", top)
		out, err := g.output(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
		if err != nil {
			return err
		}
		others = splitNUL(out)
	}
	n, err := overlay(top, ws, append(changed, others...))
	if err != nil {
		return err
	}
	files := "files"
	if n.copied == 1 {
		files = "file"
	}
	g.log.notice("working tree changes applied: %d %s copied, %d removed", n.copied, files, n.removed)
	return nil
}

func splitNUL(s string) []string {
	var out []string
	for _, p := range strings.Split(s, "\x00") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

type overlayCount struct{ copied, removed int }

// overlay makes each of paths (relative to src) in dst what it is in src:
// removed when src has none, else copied. Removals go first so that a file
// replaced by a directory (or the reverse) has room.
func overlay(src, dst string, paths []string) (overlayCount, error) {
	var n overlayCount
	var present []string
	for _, rel := range paths {
		if !filepath.IsLocal(rel) {
			return n, fmt.Errorf("git listed the path %q outside the working tree", rel)
		}
		if _, err := os.Lstat(filepath.Join(src, rel)); errors.Is(err, fs.ErrNotExist) {
			if err := removeInTree(dst, rel); err != nil {
				return n, err
			}
			n.removed++
			continue
		}
		present = append(present, rel)
	}
	for _, rel := range present {
		ok, err := copyInTree(src, dst, rel)
		if err != nil {
			return n, err
		}
		if ok {
			n.copied++
		}
	}
	return n, nil
}

// removeInTree deletes dst/rel and the directories it leaves empty.
func removeInTree(dst, rel string) error {
	if err := realParents(dst, rel); err != nil {
		return err
	}
	p := filepath.Join(dst, rel)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", rel, err)
	}
	for d := filepath.Dir(rel); d != "." && d != "/"; d = filepath.Dir(d) {
		if os.Remove(filepath.Join(dst, d)) != nil {
			break // not empty
		}
	}
	return nil
}

// copyInTree copies one file or symlink; a directory (a submodule) is left
// as git made it. It reports whether it copied.
func copyInTree(src, dst, rel string) (bool, error) {
	fi, err := os.Lstat(filepath.Join(src, rel))
	if err != nil {
		return false, err
	}
	if fi.IsDir() {
		return false, nil
	}
	if err := realParents(dst, rel); err != nil {
		return false, err
	}
	to := filepath.Join(dst, rel)
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return false, fmt.Errorf("copy %s: %w", rel, err)
	}
	// Never write through whatever is there now (it may be a symlink).
	if err := os.RemoveAll(to); err != nil {
		return false, fmt.Errorf("copy %s: %w", rel, err)
	}
	from := filepath.Join(src, rel)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(from)
		if err != nil {
			return false, err
		}
		return true, os.Symlink(target, to)
	case fi.Mode().IsRegular():
		return true, copyFile(from, to, fi.Mode().Perm())
	}
	return false, nil // sockets, devices: not part of a working tree
}

// realParents replaces any symlink among the parent directories of rel in
// dst by a real directory, so a copy cannot be redirected out of the
// workspace by a symlink the checkout created.
func realParents(dst, rel string) error {
	parts := strings.Split(filepath.Dir(rel), string(filepath.Separator))
	cur := dst
	for _, p := range parts {
		if p == "." || p == "" {
			continue
		}
		cur = filepath.Join(cur, p)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() {
			if err := os.Remove(cur); err != nil {
				return err
			}
			if err := os.Mkdir(cur, 0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
