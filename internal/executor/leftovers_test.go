package executor

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// B270: an executor starting on a work root removes the job directories
// whose owner died (their lock file is free), read-only parts included,
// and leaves alone a directory whose job still runs (its lock held by
// another open file) and a kept workspace (no lock file). A finished job
// leaves nothing behind, a kept one only its directory.
func TestLeftoverJobDirectoriesAreRemovedAtStart(t *testing.T) {
	root := t.TempDir()
	dead, deadLock, err := claimJobDir(root, "dead")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dead, "ws", "go", "pkg", "mod.txt"), "cached")
	if err := os.Chmod(filepath.Join(dead, "ws", "go", "pkg"), 0o555); err != nil {
		t.Fatal(err)
	}
	deadLock.Close() // the agent was killed: the kernel drops its lock

	live, liveLock, err := claimJobDir(root, "live")
	if err != nil {
		t.Fatal(err)
	}
	defer liveLock.Close()
	kept := filepath.Join(root, "job-kept-123")
	writeFile(t, filepath.Join(kept, "ws", "notes"), "look at me")

	x := newExecutor(t, func(c *Config) { c.WorkRoot = root })
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead job's directory is still there (%v)", err)
	}
	if _, err := os.Stat(dead + lockSuffix); !os.IsNotExist(err) {
		t.Fatalf("the dead job's lock file is still there (%v)", err)
	}
	for _, d := range []string{live, live + lockSuffix, kept} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s was removed: %v", d, err)
		}
	}

	before := entries(t, root)
	res, _ := runJob(t, x, &Job{JobID: "done", Steps: []Step{{Run: "echo hi > file"}}})
	if got := entries(t, root); !slices.Equal(got, before) {
		t.Fatalf("a finished job left %v behind (before: %v; %s)", got, before, res.Error)
	}
	res, _ = runJob(t, x, &Job{JobID: "keep", KeepWorkspace: true, Steps: []Step{{Run: "echo hi > file"}}})
	if res.Workspace == "" {
		t.Fatalf("no kept workspace: %+v", res)
	}
	newExecutor(t, func(c *Config) { c.WorkRoot = root })
	if _, err := os.Stat(filepath.Join(res.Workspace, "file")); err != nil {
		t.Fatalf("a kept workspace was removed by the next start: %v", err)
	}
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}
