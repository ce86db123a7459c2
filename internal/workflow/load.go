package workflow

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Dir is where a repository keeps its workflow files, relative to its root.
const Dir = ".kiln/workflows"

// ErrNoWorkflows is wrapped by LoadDir when a repository has no workflow files.
var ErrNoWorkflows = errors.New("no workflow files")

// IsWorkflowFile reports whether a file name in Dir is a workflow file:
// it ends in .yml or .yaml. Other files (a README) are not workflows;
// subdirectories are not read.
func IsWorkflowFile(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return (ext == ".yml" || ext == ".yaml") && len(name) > len(ext)
}

// LoadDir parses every workflow file in repoRoot/.kiln/workflows, in name
// order. It returns the valid workflows and, when any file has problems, an
// ErrorList of all of them (file paths relative to repoRoot, with slashes);
// other errors mean the directory could not be read. Two workflows with the
// same name are an error: runs are recorded under the workflow's name.
func LoadDir(repoRoot string) ([]*Workflow, error) {
	dir := filepath.Join(repoRoot, filepath.FromSlash(Dir))
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoWorkflows)
	}
	if err != nil {
		return nil, fmt.Errorf("read workflows: %w", err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && IsWorkflowFile(e.Name()) {
			files = append(files, e.Name())
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: %w (looked for *.yml and *.yaml)", dir, ErrNoWorkflows)
	}
	slices.Sort(files)
	var out []*Workflow
	var errs ErrorList
	byName := map[string]string{}
	for _, name := range files {
		rel := Dir + "/" + name
		data, ferr := readFile(filepath.Join(dir, name), rel)
		if ferr != nil {
			errs = append(errs, ferr)
			continue
		}
		w, perr := Parse(rel, data)
		if perr != nil {
			var list ErrorList
			if errors.As(perr, &list) {
				errs = append(errs, list...)
			}
			continue
		}
		if other, dup := byName[w.Name]; dup {
			errs = append(errs, &Error{File: rel, Line: 1, Col: 1, Msg: fmt.Sprintf("workflow name %q is also used by %s; names must be unique in a repository", w.Name, other)})
			continue
		}
		byName[w.Name] = rel
		out = append(out, w)
	}
	if len(errs) > 0 {
		return out, errs.sort()
	}
	return out, nil
}

// readFile reads a workflow file, refusing one over MaxFileSize without
// reading it all.
func readFile(path, rel string) ([]byte, *Error) {
	// Stat first (following symlinks): opening a FIFO or a device would block
	// or read forever.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, &Error{File: rel, Line: 1, Col: 1, Msg: "not a regular file; a workflow file must be a plain file"}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: rel, Line: 1, Col: 1, Msg: fmt.Sprintf("cannot read the file: %v", errors.Unwrap(err))}
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > MaxFileSize {
		return nil, &Error{File: rel, Line: 1, Col: 1, Msg: fmt.Sprintf("the file is %d bytes; a workflow file may be at most 1 MiB", st.Size())}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, &Error{File: rel, Line: 1, Col: 1, Msg: fmt.Sprintf("cannot read the file: %v", err)}
	}
	return data, nil
}
