package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// runStep decides whether step i runs, runs it with its retries and
// records how it ended.
func (e *Execution) runStep(i int, js *jobState) {
	st := &e.job.Steps[i]
	name := st.displayName(i)
	if e.isTimedOut() {
		js.timedOut = true
	}
	if e.isCancelled() {
		js.cancelled = true
	}
	if js.timedOut || e.isForced() {
		e.skip(js, i, name)
		return
	}
	ev := &evalEnv{contexts: e.contexts(js, js.env), status: js.status(), hashFiles: hashFilesIn(js.ws.dir)}
	cond := st.If
	if strings.TrimSpace(cond) == "" {
		cond = "success()"
	}
	ok, err := evalCondition(cond, ev)
	if err != nil {
		e.failUnstarted(js, i, st, name, fmt.Sprintf("if: %v", err))
		return
	}
	if !ok {
		e.skip(js, i, name)
		return
	}
	p, err := e.prepare(i, st, js, ev)
	if err != nil {
		e.failUnstarted(js, i, st, name, err.Error())
		return
	}
	e.execute(i, st, name, p, js)
}

// failUnstarted reports a step that failed before its script could start
// (a bad if:, env value or working directory).
func (e *Execution) failUnstarted(js *jobState, i int, st *Step, name, msg string) {
	now := e.x.cfg.Clock()
	e.finish(js, StepEvent{Index: i, Name: name, Status: kiln.StepFailed, ExitCode: -1, StartedAt: now, FinishedAt: now, Error: msg})
	if !st.ContinueOnError {
		js.fail(fmt.Sprintf("step %q failed: %s", name, msg))
	}
}

// prepared is a step ready to run: everything but the per-attempt files.
type prepared struct {
	argv []string
	env  envMap
	dir  string
}

// prepare evaluates the step's templates, writes its script and builds its
// environment: the sanitized agent environment, CI=true, then workflow env,
// job env, $KILN_ENV additions and $KILN_PATH, then the step's env, then
// the expression variables of run: and the KILN_* variables.
func (e *Execution) prepare(i int, st *Step, js *jobState, ev *evalEnv) (*prepared, error) {
	stepEnv := make(map[string]string, len(st.Env))
	for _, k := range sortedKeys(st.Env) {
		v, err := renderTemplate(st.Env[k], ev)
		if err != nil {
			return nil, fmt.Errorf("env %s: %v", k, err)
		}
		stepEnv[k] = v
	}
	scoped := js.env.clone()
	scoped.setAll(stepEnv)
	ev = &evalEnv{contexts: e.contexts(js, scoped), status: ev.status, hashFiles: ev.hashFiles}

	script, vars := st.Run, []envVar(nil)
	if shFamily(st.Shell) {
		var err error
		if script, vars, err = substituteRun(st.Run, ev, exprVarPrefix); err != nil {
			return nil, fmt.Errorf("run: %v", err)
		}
	} else if hasExpressions(st.Run) {
		return nil, fmt.Errorf("run: expressions work only with sh-family shells; put the value in the step's env: and read it from the environment")
	}

	dir := js.ws.dir
	if st.WorkingDirectory != "" {
		wd, err := renderTemplate(st.WorkingDirectory, ev)
		if err != nil {
			return nil, fmt.Errorf("working_directory: %v", err)
		}
		if !filepath.IsAbs(wd) {
			wd = filepath.Join(js.ws.dir, wd)
		}
		if fi, err := os.Stat(wd); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("working_directory %q is not a directory", st.WorkingDirectory)
		}
		dir = wd
	}
	path, err := js.ws.writeScript(i, script)
	if err != nil {
		return nil, err
	}
	argv := shellArgv(st.Shell, path)

	env := newEnvMap(e.x.baseEnv)
	env["CI"] = "true"
	env.setAll(js.env)
	env.prependPath(js.paths)
	env.setAll(stepEnv)
	for _, v := range vars {
		env[v.Name] = v.Value
	}
	env["KILN"] = "true"
	env["KILN_WORKSPACE"] = js.ws.dir
	env["KILN_TEMP"] = js.ws.tmp
	env["KILN_RUN_ID"] = e.job.RunID
	env["KILN_JOB_ID"] = e.job.JobID
	env["KILN_JOB"] = e.job.Name
	setContextVars(env, e.job.Contexts)
	return &prepared{argv: argv, env: env, dir: dir}, nil
}

// contextVars are the KILN_* variables read from the expression contexts:
// what a CI job usually wants to know without an expression (the commit,
// the ref, the run's number), as environment variables, never as text
// pasted into a script.
var contextVars = []struct{ name, context, key string }{
	{"KILN_WORKFLOW", "run", "workflow"},
	{"KILN_RUN_NUMBER", "run", "number"},
	{"KILN_RUN_ATTEMPT", "run", "attempt"},
	{"KILN_EVENT", "event", "name"},
	{"KILN_REPOSITORY", "event", "repository"},
	{"KILN_REF", "event", "ref"},
	{"KILN_SHA", "event", "sha"},
	{"KILN_BRANCH", "event", "branch"},
	{"KILN_BASE_BRANCH", "event", "base_branch"},
	{"KILN_TAG", "event", "tag"},
	{"KILN_ACTOR", "event", "actor"},
}

func setContextVars(env envMap, contexts map[string]any) {
	for _, v := range contextVars {
		c, _ := contexts[v.context].(map[string]any)
		switch x := c[v.key].(type) {
		case string:
			if x != "" {
				env[v.name] = x
			}
		case float64:
			env[v.name] = strconv.FormatFloat(x, 'f', -1, 64)
		}
	}
}

// execute runs a prepared step's attempts and reports the step's end.
func (e *Execution) execute(i int, st *Step, name string, p *prepared, js *jobState) {
	log := e.newStepLog(i, js.masker)
	afterCancel := e.isCancelled()
	started := e.x.cfg.Clock()
	timeout := st.Timeout
	if timeout == 0 {
		timeout = e.x.cfg.DefaultStepTimeout
	}
	attempts := st.Retry.attempts()
	var (
		out     outcome
		errMsg  string
		files   *stepFiles
		attempt int
	)
	for attempt = 1; ; attempt++ {
		f, err := js.ws.stepFiles(i, attempt)
		if err != nil {
			out, errMsg = outcome{exitCode: -1, err: err}, err.Error()
			break
		}
		files = f
		env := p.env.clone()
		m := js.ws.meta
		env["KILN_ENV"], env["KILN_PATH"], env["KILN_OUTPUT"] = filepath.Join(m, f.env), filepath.Join(m, f.path), filepath.Join(m, f.output)
		e.em.step(StepEvent{Index: i, Name: name, Status: kiln.StepRunning, Attempt: attempt, ExitCode: -1, StartedAt: started})
		if attempt > 1 {
			log.notice("attempt %d of %d", attempt, attempts)
		}
		out = e.runCommand(command{argv: p.argv, env: env.list(), dir: p.dir, timeout: timeout, afterCancel: afterCancel}, log)
		errMsg = e.describe(out, timeout)
		if errMsg == "" || out.stop == stopCancel || out.stop == stopJobTimeout || attempt >= attempts {
			break
		}
		wait := st.Retry.wait(attempt)
		log.notice("attempt %d of %d failed: %s; retrying in %s", attempt, attempts, errMsg, wait)
		if r := e.retryWait(wait, afterCancel); r != stopNone {
			out.stop = r
			errMsg = e.describe(outcome{stop: r}, timeout)
			break
		}
	}
	if files != nil {
		if err := e.applyStepFiles(js, files); err != nil {
			log.notice("%v", err)
			if errMsg == "" {
				errMsg = err.Error()
			}
		}
	}
	ev := StepEvent{
		Index: i, Name: name, Attempt: attempt, ExitCode: out.exitCode,
		StartedAt: started, Error: errMsg, LogBytes: log.close(),
	}
	ev.FinishedAt = e.x.cfg.Clock()
	switch {
	case errMsg == "":
		ev.Status = kiln.StepSuccess
	case out.stop == stopCancel:
		ev.Status = kiln.StepCancelled
		js.cancelled = true
	default:
		ev.Status = kiln.StepFailed
		if out.stop == stopJobTimeout {
			js.timedOut = true
		} else if !st.ContinueOnError {
			js.fail(fmt.Sprintf("step %q failed: %s", name, errMsg))
		}
	}
	e.finish(js, ev)
}

// retryWait waits before the next attempt; a cancel or the job timeout
// ends the wait (and the step) early.
func (e *Execution) retryWait(d time.Duration, afterCancel bool) stopReason {
	t := time.NewTimer(d)
	defer t.Stop()
	cancelled := e.cancelled
	if afterCancel {
		cancelled = nil
	}
	select {
	case <-t.C:
		return stopNone
	case <-cancelled:
		return stopCancel
	case <-e.forced:
		return stopCancel
	case <-e.timedOut:
		return stopJobTimeout
	}
}
