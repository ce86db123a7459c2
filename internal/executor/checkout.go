package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// checkoutName is the name of the checkout pseudo-step.
const checkoutName = "checkout"

// runCheckout fills the workspace before the first step and reports it as
// the pseudo-step CheckoutIndex.
func (e *Execution) runCheckout(js *jobState) {
	if e.isCancelled() || e.isTimedOut() {
		js.cancelled = e.isCancelled()
		js.timedOut = !js.cancelled
		e.skip(js, CheckoutIndex, checkoutName)
		return
	}
	log := js.setup
	started := e.x.cfg.Clock()
	e.em.step(StepEvent{Index: CheckoutIndex, Name: checkoutName, Status: kiln.StepRunning, Attempt: 1, ExitCode: -1, StartedAt: started})
	g := &gitRunner{e: e, log: log, git: e.x.cfg.GitPath, timeout: e.x.cfg.DefaultStepTimeout,
		deadline: time.Now().Add(e.x.cfg.DefaultStepTimeout)}
	err := e.checkout(g, js.ws)
	// Credentials live no longer than the checkout.
	for _, f := range []string{"ssh-key", "known_hosts", "gitconfig"} {
		js.ws.removeMeta(f)
	}
	ev := StepEvent{Index: CheckoutIndex, Name: checkoutName, Attempt: 1, ExitCode: g.exitCode, StartedAt: started}
	switch {
	case err == nil:
		ev.Status, ev.ExitCode = kiln.StepSuccess, 0
	case g.stop == stopCancel:
		ev.Status, ev.Error = kiln.StepCancelled, "cancelled"
		js.cancelled = true
	case g.stop == stopJobTimeout:
		ev.Status, ev.Error = kiln.StepFailed, fmt.Sprintf("job timed out after %s", e.job.Timeout)
		js.timedOut = true
	default:
		msg := err.Error()
		if hint := e.job.Checkout.Hint; hint != "" {
			msg += " (" + hint + ")"
		}
		ev.Status, ev.Error = kiln.StepFailed, msg
		js.fail("checkout failed: " + msg)
	}
	if err != nil && g.stop == stopNone {
		log.notice("checkout failed: %v", err)
		if hint := e.job.Checkout.Hint; hint != "" {
			log.notice("%s", hint)
		}
	}
	ev.LogBytes = log.flushed() // artifacts may add lines after the checkout
	ev.FinishedAt = e.x.cfg.Clock()
	e.finish(js, ev)
}

func (e *Execution) checkout(g *gitRunner, ws *workspace) error {
	c := e.job.Checkout
	var safe []string
	if c.LocalPath != "" {
		src, err := filepath.Abs(c.LocalPath)
		if err != nil {
			return err
		}
		safe = safeDirsFor(src)
	} else if p := localRepoPath(c.URL); p != "" {
		safe = safeDirsFor(p)
	}
	env, err := e.gitEnv(ws, c, safe)
	if err != nil {
		return err
	}
	g.env = env
	if c.LocalPath != "" {
		return e.checkoutLocal(g, c, ws.dir)
	}
	return e.checkoutRemote(g, c, ws.dir)
}

// checkoutRemote fetches the commit (shallow by default) into a fresh
// repository and checks it out detached, then verifies HEAD.
func (e *Execution) checkoutRemote(g *gitRunner, c *Checkout, ws string) error {
	remote := cleanURL(c.URL)
	g.remote = remote
	if err := g.run(ws, "init", "-q"); err != nil {
		return err
	}
	if err := g.run(ws, "remote", "add", "origin", remote); err != nil {
		return err
	}
	fetch := func(depth int, what string) error {
		args := []string{"fetch", "--no-tags", "--no-recurse-submodules"}
		if depth >= 0 {
			args = append(args, "--depth="+strconv.Itoa(max(depth, 1)))
		}
		return g.retrying(func() error { return g.run(ws, append(args, "origin", what)...) })
	}
	target := "FETCH_HEAD"
	if c.SHA != "" {
		target = c.SHA
		g.log.notice("fetching %s at %s", remote, c.SHA)
		err := fetch(c.Depth, c.SHA)
		if f := (*gitFailure)(nil); err != nil && g.stop == stopNone && c.Ref != "" && !(errors.As(err, &f) && f.transient) {
			// Some servers refuse to serve a commit by id; fetch the ref's
			// whole history instead, which contains it. (Not when the
			// server could not be reached at all.)
			g.log.notice("the server did not serve the commit by id; fetching %s instead", c.Ref)
			err = fetch(-1, c.Ref)
		}
		if err != nil {
			return err
		}
	} else {
		g.log.notice("fetching %s at %s", remote, c.Ref)
		if err := fetch(c.Depth, c.Ref); err != nil {
			return err
		}
	}
	if err := g.run(ws, "checkout", "-q", "--force", "--detach", target); err != nil {
		return err
	}
	head, err := g.output(ws, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	head = strings.TrimSpace(head)
	if c.SHA != "" && !strings.EqualFold(head, c.SHA) {
		return fmt.Errorf("HEAD is %s after checkout, not the requested commit %s", head, c.SHA)
	}
	g.log.notice("HEAD is now %s", head)
	return nil
}

// safeDirsFor lists what safe.directory must name for git to work in a
// repository another user may own: the working tree and its git directory.
func safeDirsFor(path string) []string {
	dirs := []string{path}
	for d := path; ; d = filepath.Dir(d) {
		dotgit := filepath.Join(d, ".git")
		if fi, err := os.Stat(dotgit); err == nil {
			dirs = append(dirs, d, dotgit)
			if !fi.IsDir() { // a linked worktree: .git names its git directory
				if b, err := os.ReadFile(dotgit); err == nil {
					if gd, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: "); ok {
						if !filepath.IsAbs(gd) {
							gd = filepath.Join(d, gd)
						}
						dirs = append(dirs, gd, filepath.Dir(filepath.Dir(gd)))
					}
				}
			}
			break
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return dirs
}

// gitRunner runs the checkout's git commands under the same supervision,
// timeout and cancel rules as a step.
type gitRunner struct {
	e        *Execution
	log      *stepLog
	git      string
	env      []string
	timeout  time.Duration
	deadline time.Time
	stop     stopReason // why a command was stopped, if one was
	exitCode int        // of the last command that ran
	remote   string     // the URL fetched from, without credentials
}

// run runs a git command whose output goes to the checkout's log.
func (g *gitRunner) run(dir string, args ...string) error {
	g.log.notice("git %s", strings.Join(args, " "))
	left := time.Until(g.deadline)
	if left <= 0 {
		g.stop = stopStepTimeout
		return fmt.Errorf("checkout timed out after %s", g.timeout)
	}
	g.log.takeErrTail()
	out := g.e.runCommand(command{argv: append([]string{g.git}, args...), env: g.env, dir: dir, timeout: left}, g.log)
	g.exitCode = out.exitCode
	switch {
	case out.err != nil:
		return fmt.Errorf("could not run git: %v", out.err)
	case out.stop == stopStepTimeout:
		g.stop = stopNone // a checkout timeout is a plain failure
		return fmt.Errorf("checkout timed out after %s", g.timeout)
	case out.stop != stopNone:
		g.stop = out.stop
		return errors.New(g.e.describe(out, g.timeout))
	case out.exitCode != 0:
		return classifyGit(args[0], out.exitCode, g.log.takeErrTail(), g.remote)
	}
	return nil
}

// Fetch retries: a fetch that failed for a reason that may pass is tried
// up to fetchAttempts times, fetchRetryBase apart, doubling.
const (
	fetchAttempts  = 4
	fetchRetryBase = time.Second
)

// retrying runs fetch until it succeeds, fails for good, is stopped, or
// has been tried fetchAttempts times, saying in the log why it tries again.
func (g *gitRunner) retrying(fetch func() error) error {
	wait := fetchRetryBase
	for attempt := 1; ; attempt++ {
		err := fetch()
		var f *gitFailure
		if err == nil || g.stop != stopNone || !errors.As(err, &f) || !f.transient || attempt == fetchAttempts ||
			time.Until(g.deadline) < wait {
			return err
		}
		g.log.notice("%s; trying again in %s (attempt %d of %d)", f.cause, wait, attempt+1, fetchAttempts)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-g.e.stopCtx.Done():
			t.Stop()
			return err
		}
		wait *= 2
	}
}

// output runs a quick local git command and returns its standard output.
func (g *gitRunner) output(dir string, args ...string) (string, error) {
	ctx, cancel := context.WithDeadline(g.e.stopCtx, g.deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.git, args...)
	cmd.Dir, cmd.Env = dir, g.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	g.exitCode = cmd.ProcessState.ExitCode()
	if err != nil {
		if g.e.isForced() {
			g.stop = stopCancel
		} else if g.e.isTimedOut() {
			g.stop = stopJobTimeout
		}
		msg, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s: %s", args[0], msg)
	}
	return string(out), nil
}
