package executor

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// A job directory has a lock file beside it, job-<id>-<random>.lock, made
// before the directory and locked (flock) by the executor running the job
// for as long as the directory exists. An agent killed by SIGKILL or a
// power cut cannot remove its job directories, but the kernel drops its
// locks: the next executor on the work root finds every lock file it can
// lock and removes that directory (B270). A directory without a lock file
// is never touched — a kept workspace, or one older kiln made — and
// neither is one whose lock another live process holds, so two agents (or
// `kiln run`) sharing a work root never remove each other's jobs.
const lockSuffix = ".lock"

// claimJobDir makes a job directory under workRoot, holding its lock.
func claimJobDir(workRoot, jobID string) (root string, lock *os.File, err error) {
	lock, err = os.CreateTemp(workRoot, "job-"+fileSafe(jobID)+"-*"+lockSuffix)
	if err != nil {
		return "", nil, err
	}
	fail := func(err error) (string, *os.File, error) {
		_ = os.Remove(lock.Name())
		lock.Close()
		return "", nil, err
	}
	held, err := tryLock(lock)
	if err != nil {
		return fail(err)
	}
	if !held {
		// Only a cleaner that opened the file this instant holds it.
		return fail(fmt.Errorf("the lock file %s is held by another process", lock.Name()))
	}
	root = strings.TrimSuffix(lock.Name(), lockSuffix)
	if err := os.Mkdir(root, 0o700); err != nil {
		return fail(err)
	}
	return root, lock, nil
}

// releaseJobDir drops the lock of a job directory already removed (or
// kept): the lock file goes, so the directory is never cleaned.
func releaseJobDir(lock *os.File) {
	_ = os.Remove(lock.Name())
	lock.Close()
}

// removeLeftovers removes the job directories under workRoot whose owner
// is gone, and says how many it removed.
func removeLeftovers(workRoot string, log *slog.Logger) int {
	locks, _ := filepath.Glob(filepath.Join(workRoot, "job-*"+lockSuffix))
	removed := 0
	for _, path := range locks {
		if removeLeftover(path, log) {
			removed++
		}
	}
	if removed > 0 {
		log.Info("removed job directories left by an agent that did not end cleanly", "count", removed, "work_root", workRoot)
	}
	return removed
}

func removeLeftover(lockPath string, log *slog.Logger) bool {
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if err != nil {
		return false // removed meanwhile by its owner
	}
	defer f.Close()
	if held, err := tryLock(f); err != nil || !held {
		return false // its job is running
	}
	dir := strings.TrimSuffix(lockPath, lockSuffix)
	if err := removeTree(dir); err != nil {
		// The lock file stays, so the next start tries again.
		log.Warn("remove a job directory left by an agent that did not end cleanly", "dir", dir, "err", err)
		return false
	}
	_ = os.Remove(lockPath)
	return true
}
