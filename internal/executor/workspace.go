package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// workspace is one job's directory under Config.WorkRoot:
//
//	job-<id>-<random>/      0700
//	  ws/                   the checkout; $KILN_WORKSPACE and the default working directory
//	  tmp/                  $KILN_TEMP
//	  meta/                 step scripts, $KILN_ENV/$KILN_PATH/$KILN_OUTPUT files, git credentials
type workspace struct {
	root, dir, tmp, meta string
}

func newWorkspace(workRoot, jobID string) (*workspace, error) {
	root, err := os.MkdirTemp(workRoot, "job-"+fileSafe(jobID)+"-")
	if err != nil {
		return nil, fmt.Errorf("create the job directory: %w", err)
	}
	w := &workspace{
		root: root,
		dir:  filepath.Join(root, "ws"),
		tmp:  filepath.Join(root, "tmp"),
		meta: filepath.Join(root, "meta"),
	}
	for _, d := range []string{w.dir, w.tmp, w.meta} {
		if err := os.Mkdir(d, 0o700); err != nil {
			_ = removeTree(root)
			return nil, fmt.Errorf("create the job directory: %w", err)
		}
	}
	return w, nil
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
	base := filepath.Join(w.meta, fmt.Sprintf("step%d-%d-", index, attempt))
	f := &stepFiles{env: base + "env", path: base + "path", output: base + "output"}
	for _, n := range []string{f.env, f.path, f.output} {
		if err := os.WriteFile(n, nil, 0o600); err != nil {
			return nil, fmt.Errorf("create %s: %w", filepath.Base(n), err)
		}
	}
	return f, nil
}

// writeScript stores a step's script in meta, where the shell reads it.
func (w *workspace) writeScript(index int, script string) (string, error) {
	p := filepath.Join(w.meta, fmt.Sprintf("step%d.sh", index))
	if err := os.WriteFile(p, []byte(script), 0o700); err != nil {
		return "", fmt.Errorf("write the step's script: %w", err)
	}
	return p, nil
}

// remove deletes the job directory, or with keep everything but ws.
func (w *workspace) remove(keep bool) error {
	if keep {
		return errors.Join(removeTree(w.meta), removeTree(w.tmp))
	}
	return removeTree(w.root)
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
