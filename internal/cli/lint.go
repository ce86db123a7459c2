package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/trigger"
	"github.com/kilnci/kiln/internal/workflow"
	"github.com/spf13/cobra"
)

// lintOptions are the flags of `kiln lint`.
type lintOptions struct {
	explain string // payload file
	event   string
	forge   string
	json    bool
}

func newLintCmd(e *env) *cobra.Command {
	var o lintOptions
	cmd := &cobra.Command{
		Use:   "lint [REPO]",
		Short: "Check a repository's workflow files, or explain which an event would start",
		Long: `lint validates every workflow file in REPO/.kiln/workflows (REPO defaults to the
current directory) with the same code the server uses, and prints each problem as
"file:line:col: message". It exits 0 when every file is valid, 1 when there are
problems, and 2 on usage errors or when REPO has no workflows.

With --explain PAYLOAD.json --event TYPE it also reads a webhook payload (GitHub's
format, or Gitea's with --forge gitea) and prints, for each workflow, whether the
event would start it and the trace of every check behind that decision.`,
		Example: `  kiln lint
  kiln lint ../my-repo
  kiln lint --explain push.json --event push`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			repo := "."
			if len(args) == 1 {
				repo = args[0]
			}
			return runLint(e, repo, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.explain, "explain", "", "a webhook payload (JSON file) to match against the workflows")
	f.StringVar(&o.event, "event", "", "the payload's event type, as in the X-GitHub-Event header: push, pull_request, create, …")
	f.StringVar(&o.forge, "forge", "github", "the payload's format: github or gitea")
	f.BoolVar(&o.json, "json", false, "with --explain: print the event and the decisions as JSON")
	return cmd
}

func runLint(e *env, repo string, o lintOptions) error {
	if o.explain == "" && (o.event != "" || o.json) {
		return usageErrorf("--event and --json go with --explain PAYLOAD.json")
	}
	var ev *kiln.Event
	if o.explain != "" {
		var err error
		if ev, err = readEvent(o); err != nil {
			var ig *trigger.IgnoredError
			if errors.As(err, &ig) {
				fmt.Fprintf(e.stdout, "this %s event starts no run: %s\n", ig.Event, ig.Reason)
				return nil
			}
			return err
		}
	}
	if st, err := os.Stat(repo); err != nil || !st.IsDir() {
		return usageErrorf("%s is not a directory", repo)
	}
	wfs, err := workflow.LoadDir(repo)
	var problems workflow.ErrorList
	switch {
	case errors.Is(err, workflow.ErrNoWorkflows):
		return usageErrorf("no workflows: %s has no %s/*.yml or *.yaml files", repo, workflow.Dir)
	case errors.As(err, &problems):
	case err != nil:
		return &exitError{code: ExitFailure, err: err}
	}
	if ev != nil {
		if err := explain(e.stdout, ev, wfs, o.json); err != nil {
			return err
		}
		if len(problems) > 0 && !o.json {
			fmt.Fprintf(e.stdout, "\nnot explained, because of their problems:\n")
		}
		for _, p := range problems {
			fmt.Fprintln(e.stdout, p.Error())
		}
	} else {
		printReport(e.stdout, wfs, problems)
	}
	if len(problems) > 0 {
		fmt.Fprintf(e.stderr, "kiln: %s in %s\n", plural(len(problems), "problem"), plural(brokenFiles(problems), "workflow file"))
		return failed()
	}
	return nil
}

// printReport prints, file by file in name order, an ok line for each
// valid workflow and the problems of each broken one.
func printReport(w io.Writer, wfs []*workflow.Workflow, problems workflow.ErrorList) {
	lines := map[string][]string{}
	for _, wf := range wfs {
		lines[wf.File] = []string{fmt.Sprintf("%s: ok (workflow %q: %s)", wf.File, wf.Name, describeWorkflow(wf))}
	}
	for _, p := range problems {
		lines[p.File] = append(lines[p.File], p.Error())
	}
	files := make([]string, 0, len(lines))
	for f := range lines {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		for _, l := range lines[f] {
			fmt.Fprintln(w, l)
		}
	}
}

// readEvent reads and normalizes the --explain payload.
func readEvent(o lintOptions) (*kiln.Event, error) {
	if o.event == "" {
		return nil, usageErrorf("--explain needs --event (the X-GitHub-Event or X-Gitea-Event of the payload)")
	}
	normalize := trigger.FromGitHub
	switch o.forge {
	case "github":
	case "gitea":
		normalize = trigger.FromGitea
	default:
		return nil, usageErrorf("--forge %q: use github or gitea", o.forge)
	}
	f, err := os.Open(o.explain)
	if err != nil {
		return nil, usageErrorf("read the payload: %v", err)
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, trigger.MaxPayloadSize+1))
	if err != nil {
		return nil, usageErrorf("read the payload: %v", err)
	}
	ev, err := normalize(o.event, body)
	if err != nil && !trigger.IsIgnored(err) {
		return nil, usageErrorf("%s: %s", o.explain, kiln.ErrorMessage(err))
	}
	return ev, err
}

// explain prints each workflow's decision for ev.
func explain(w io.Writer, ev *kiln.Event, wfs []*workflow.Workflow, asJSON bool) error {
	decisions := trigger.MatchAll(wfs, ev)
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Event     *kiln.Event        `json:"event"`
			Decisions []trigger.Decision `json:"decisions"`
		}{ev, decisions})
	}
	fmt.Fprintf(w, "event: %s\n", describeEvent(ev))
	for _, d := range decisions {
		fmt.Fprintf(w, "\n%s (%s): %s\n", d.Workflow, d.File, d.Summary)
		for _, c := range d.Checks {
			mark := "fail"
			if c.Passed {
				mark = "pass"
			}
			fmt.Fprintf(w, "  %s  %-26s %s\n", mark, c.Check, c.Reason)
		}
	}
	return nil
}

func describeEvent(ev *kiln.Event) string {
	var b strings.Builder
	b.WriteString(string(ev.Name))
	switch ev.Name {
	case kiln.EventPush:
		fmt.Fprintf(&b, " to branch %s", ev.Branch)
	case kiln.EventTag:
		fmt.Fprintf(&b, " %s", ev.Tag)
	case kiln.EventPullRequest:
		fmt.Fprintf(&b, " %s #%d from %s into %s", ev.Action, ev.PR.Number, ev.Branch, ev.BaseBranch)
	}
	fmt.Fprintf(&b, " in %s at %.12s", ev.Repository, ev.SHA)
	switch {
	case ev.Name == kiln.EventTag:
	case ev.ChangedFilesStatus == "":
		b.WriteString("; changed files not in the payload (the server asks the forge)")
	default:
		fmt.Fprintf(&b, "; %s (%s)", plural(len(ev.ChangedFiles), "changed file"), ev.ChangedFilesStatus)
	}
	return b.String()
}

func describeWorkflow(w *workflow.Workflow) string {
	jobs := 0
	for _, j := range w.Jobs {
		jobs += len(j.Variants)
	}
	on := make([]string, len(w.On.Order))
	for i, n := range w.On.Order {
		on[i] = string(n)
	}
	return fmt.Sprintf("%s, on %s", plural(jobs, "job"), strings.Join(on, ", "))
}

func brokenFiles(l workflow.ErrorList) int {
	files := map[string]bool{}
	for _, e := range l {
		files[e.File] = true
	}
	return len(files)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
