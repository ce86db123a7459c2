//go:build unix

package workflow

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A FIFO named like a workflow is reported, not opened: opening it would
// block until something writes to it.
func TestLoadDirRefusesFIFO(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, ".kiln", "workflows")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, syscall.Mkfifo(filepath.Join(dir, "pipe.yml"), 0o644))
	_, err := LoadDir(root)
	var list ErrorList
	if !errors.As(err, &list) || !strings.Contains(list.Error(), ".kiln/workflows/pipe.yml:1:1: not a regular file") {
		t.Fatalf("err = %v", err)
	}
}
