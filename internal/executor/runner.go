package executor

import (
	"crypto/rand"
	"fmt"
	"os"
	"sync"
	"time"
)

// cookieVar marks every process of a step attempt with a value of its own,
// so the executor can find them should their supervisor die (sweepByCookie).
const cookieVar = "KILN_STEP_COOKIE"

// stopReason says why the executor stopped a command early.
type stopReason int

const (
	stopNone        stopReason = iota
	stopStepTimeout            // the step (or checkout) ran out of time
	stopJobTimeout             // the job ran out of time
	stopCancel                 // the job was cancelled
)

// killBackstop is how long the shim gets to kill a step before the
// executor kills the shim itself; a healthy shim needs milliseconds.
const killBackstop = 10 * time.Second

// drainLimit is how long the executor waits, once the shim has exited,
// for a step's pipes to make progress before it closes them. The shim has
// killed every process that could hold them, so this only bounds a
// pathological case (a descriptor passed out of the step's process tree).
const drainLimit = 30 * time.Second

// command is one process to run under the shim.
type command struct {
	argv    []string
	env     []string
	dir     string
	timeout time.Duration // 0 = none
	// afterCancel: the command started after a graceful cancel (an
	// always() step), so only a forced cancel stops it.
	afterCancel bool
}

// outcome is how a command ended.
type outcome struct {
	exitCode int
	stop     stopReason
	err      error // it could not be started
}

// runCommand runs c, streaming its output into log, and returns when the
// command and every process it started are gone and its output is read.
func (e *Execution) runCommand(c command, log *stepLog) outcome {
	outR, outW, err := os.Pipe()
	if err != nil {
		return outcome{exitCode: -1, err: err}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return outcome{exitCode: -1, err: err}
	}
	cookie := rand.Text()
	env := append(c.env[:len(c.env):len(c.env)], cookieVar+"="+cookie)
	lease, err := e.x.openLease()
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return outcome{exitCode: -1, err: err}
	}
	p, err := startProcess(e.x.cfg.ShimPath, e.x.sandboxFor(), e.jobDir, lease, c.argv, env, c.dir, outW, errW)
	outW.Close()
	errW.Close()
	if lease != nil {
		lease.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		return outcome{exitCode: -1, err: err}
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); log.read(outR, StreamStdout) }()
	go func() { defer readers.Done(); log.read(errR, StreamStderr) }()

	stop := e.supervise(p, c)
	if p.exitCode < 0 { // the shim itself was killed: it could not clean up
		if n := sweepByCookie(cookie); n > 0 {
			e.log.Warn("the step supervisor was killed; killed the step's processes it left", "processes", n)
		}
	}

	exited := time.Now()
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
drain:
	for {
		select {
		case <-drained:
			break drain
		case <-tick.C:
			if last := log.lastActivity(); time.Since(last) > drainLimit && time.Since(exited) > drainLimit {
				e.log.Warn("step output still open after its processes exited; closing it")
				break drain
			}
		}
	}
	outR.Close()
	errR.Close()
	<-drained
	return outcome{exitCode: p.exitCode, stop: stop}
}

// supervise waits for p, enforcing the timeouts and cancels: a graceful
// stop is SIGTERM to the step's process group, then after the grace period
// SIGKILL to every process of the step; a forced stop is that SIGKILL at
// once.
func (e *Execution) supervise(p *process, c command) stopReason {
	var stepTimeout <-chan time.Time
	if c.timeout > 0 {
		t := time.NewTimer(c.timeout)
		defer t.Stop()
		stepTimeout = t.C
	}
	cancelled, forced, jobTimeout := e.cancelled, e.forced, e.timedOut
	if c.afterCancel {
		cancelled = nil
	}
	reason := stopNone
	var grace, backstop <-chan time.Time
	stopGracefully := func(r stopReason) {
		if reason != stopNone {
			return
		}
		reason = r
		p.terminate()
		t := time.NewTimer(e.x.cfg.GracePeriod)
		grace = t.C
	}
	killNow := func() {
		if backstop != nil {
			return
		}
		p.kill()
		backstop = time.After(killBackstop)
	}
	forceStop := func() {
		if reason == stopNone || reason == stopStepTimeout {
			reason = stopCancel
		}
		killNow()
	}
	for {
		// A forced cancel wins over whatever else is ready.
		if isClosed(forced) {
			forced = nil
			forceStop()
		}
		select {
		case <-p.done:
			return reason
		case <-forced:
			forced = nil
			forceStop()
		case <-stepTimeout:
			stepTimeout = nil
			stopGracefully(stopStepTimeout)
		case <-jobTimeout:
			jobTimeout = nil
			stopGracefully(stopJobTimeout)
		case <-cancelled:
			cancelled = nil
			if isClosed(e.forced) {
				continue // a forced cancel closes both; the top of the loop handles it
			}
			stopGracefully(stopCancel)
		case <-grace:
			grace = nil
			killNow()
		case <-backstop:
			e.log.Error("the step supervisor did not exit after SIGUSR1; killing it")
			p.killShim()
			backstop = make(chan time.Time) // never again
		}
	}
}

// describe turns an outcome into a step error ("" for success).
func (e *Execution) describe(o outcome, stepTimeout time.Duration) string {
	switch {
	case o.err != nil:
		return fmt.Sprintf("could not start the step: %v", o.err)
	case o.stop == stopCancel:
		return "cancelled"
	case o.stop == stopJobTimeout:
		return fmt.Sprintf("job timed out after %s", e.job.Timeout)
	case o.stop == stopStepTimeout:
		return fmt.Sprintf("step timed out after %s", stepTimeout)
	case o.exitCode < 0:
		return "the step's supervisor process was killed"
	case o.exitCode != 0:
		return fmt.Sprintf("exit code %d", o.exitCode)
	}
	return ""
}
