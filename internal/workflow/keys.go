package workflow

import (
	"fmt"
	"regexp"
)

// The keys allowed at each level of a workflow file (docs/workflow.md).
var (
	workflowKeys    = []string{"name", "on", "env", "timeout", "concurrency", "approval", "jobs"}
	concurrencyKeys = []string{"group", "cancel_in_progress"}
	triggerNames    = []string{"push", "pull_request", "tag", "schedule", "dispatch"}
	pushKeys        = []string{"branches", "paths"}
	pullRequestKeys = []string{"types", "branches", "paths"}
	scheduleKeys    = []string{"cron", "timezone"}
	dispatchKeys    = []string{"inputs"}
	inputKeys       = []string{"type", "options", "default", "required", "description"}
	jobKeys         = []string{
		"needs", "if", "runs_on", "exclude_labels", "env", "matrix", "include", "exclude",
		"max_parallel", "fail_fast", "timeout", "on_agent_lost", "checkout", "steps",
		"context", "secrets", "approval", "cache", "artifacts", "container", "resources",
	}
	needKeys      = []string{"job", "when"}
	stepKeys      = []string{"name", "run", "shell", "if", "env", "working_directory", "timeout", "retry", "continue_on_error"}
	retryKeys     = []string{"max_attempts", "delay", "backoff", "max_delay"}
	resourcesKeys = []string{"cpus", "memory"}
	cacheKeys     = []string{"key", "paths", "restore_keys"}
	artifactKeys  = []string{"name", "paths"}
	containerKeys = []string{"image", "env"}
)

// notYet lists the keys kiln recognises but whose behaviour is not built
// yet, with what using them would silently lose. Using one is a lint error:
// a workflow must never run unprotected, unisolated or without the caches,
// artifacts or limits it asked for. Each later release deletes its line.
var notYet = map[string]string{
	"context":     "jobs cannot run in a protected context yet, so this job would run without its protection rules",
	"secrets":     "kiln does not hand secrets to jobs yet",
	"concurrency": "runs are not grouped yet, so they would not queue behind or cancel each other",
	"approval":    "kiln cannot hold a job for approval yet",
	"container":   "kiln runs steps on the agent's host only; container isolation comes later",
}

// hints answers keys people bring from other CI systems.
var hints = map[string]string{
	"runs-on":             "write runs_on (kiln keys use underscores)",
	"timeout-minutes":     `write timeout: 30m`,
	"timeout_minutes":     `write timeout: 30m`,
	"continue-on-error":   "write continue_on_error",
	"working-directory":   "write working_directory",
	"max-parallel":        "write max_parallel",
	"fail-fast":           "write fail_fast",
	"strategy":            "write matrix:, include:, exclude:, max_parallel: and fail_fast: directly in the job",
	"uses":                "kiln steps run shell commands (run:); there are no actions to use",
	"with":                "kiln steps run shell commands (run:); there are no actions to configure",
	"id":                  "steps have no ids; write KEY=value to $KILN_OUTPUT to pass outputs to dependent jobs",
	"branches-ignore":     `list the branch with a "!" prefix in branches: instead`,
	"paths-ignore":        `list the path with a "!" prefix in paths: instead`,
	"tags":                "tags have their own trigger: on: {tag: [\"v*\"]}",
	"workflow_dispatch":   "manual runs use the dispatch trigger",
	"repository_dispatch": "manual runs use the dispatch trigger",
	"pull_request_target": "use pull_request",
	"services":            "service containers are not available; start what you need in a step",
	"defaults":            "set shell: and working_directory: on each step",
	"outputs":             "steps write KEY=value to $KILN_OUTPUT; there is no outputs: declaration",
	"environment":         "this is called context in kiln",
	"image":               "this is called container in kiln",
	"cron":                `schedules are a list under on.schedule: [{cron: "0 3 * * *"}]`,
	"requests":            "a job states one amount, which is both reserved and its limit: write resources: {cpus: 2, memory: 4g}",
	"limits":              "a job states one amount, which is both reserved and its limit: write resources: {cpus: 2, memory: 4g}",
}

// keyHint returns a sentence suffix for an unknown key.
func keyHint(key string, known []string) string {
	if h, ok := hints[key]; ok {
		return "; " + h
	}
	return didYouMean(key, known)
}

// idRE is the shape of job ids, matrix keys and input names.
var idRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// envNameRE is the shape of environment variable names.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// MaxIDLen bounds ids and names so that they fit in logs, URLs and labels.
const MaxIDLen = 100

func idProblem(id, what string) string {
	switch {
	case id == "":
		return fmt.Sprintf("%s is empty", what)
	case len(id) > MaxIDLen:
		return fmt.Sprintf("%s %.20q… is longer than %d characters", what, id, MaxIDLen)
	case !idRE.MatchString(id):
		return fmt.Sprintf("%s %q must start with a letter or _ and contain only letters, digits, _ and -", what, id)
	}
	return ""
}
