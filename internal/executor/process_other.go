//go:build !linux

package executor

import (
	"errors"
	"os"
)

var errUnsupported = errors.New("running steps needs Linux: kiln supervises steps with process groups and a child subreaper")

type process struct {
	done     chan struct{}
	exitCode int
}

type sandbox struct{ isolate bool }

func newSandbox(iso Isolation) (*sandbox, error) {
	if iso.StepUser != nil {
		return nil, errUnsupported
	}
	return &sandbox{isolate: iso.Mode == IsolationAuto || iso.Mode == IsolationRequired}, nil
}

func (sb *sandbox) settle(shimPath string, env []string) error {
	if sb.isolate {
		sb.isolate = false
		return &isolationError{err: errUnsupported}
	}
	return nil
}

type isolationError struct{ err error }

func (e *isolationError) Error() string {
	return "steps cannot be isolated on this host: " + e.err.Error()
}
func (e *isolationError) Unwrap() error { return e.err }

func (sb *sandbox) describe() string { return "" }

func startProcess(shimPath string, sb *sandbox, jobDir string, lease *os.File, argv, env []string, dir string, stdout, stderr *os.File) (*process, error) {
	return nil, errUnsupported
}

func (p *process) terminate() {}
func (p *process) kill()      {}
func (p *process) killShim()  {}

func supported() error { return errUnsupported }

func sweepByCookie(cookie string) int { return 0 }

// MaybeRunShim does nothing where steps cannot run.
func MaybeRunShim() {}

func fileOwner(fi os.FileInfo) (int, bool) { return 0, false }

func fileOwnerGroup(fi os.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }
