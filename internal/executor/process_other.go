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

func startProcess(shimPath string, argv, env []string, dir string, stdout, stderr *os.File) (*process, error) {
	return nil, errUnsupported
}

func (p *process) terminate() {}
func (p *process) kill()      {}
func (p *process) killShim()  {}

func supported() error { return errUnsupported }

func sweepByCookie(cookie string) int { return 0 }

// MaybeRunShim does nothing where steps cannot run.
func MaybeRunShim() {}
