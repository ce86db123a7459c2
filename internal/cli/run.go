package cli

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/localrun"
)

func newRunCmd(e *env) *cobra.Command {
	var o localrun.Options
	var event string
	var inputs, files []string
	var filesSet bool
	cmd := &cobra.Command{
		Use:   "run [REPO]",
		Short: "Run this repository's workflows locally, through the real engine",
		Long: `Run the workflows of a repository (default: the current directory) on this
machine, against the working tree as it is, uncommitted changes included. kiln run
starts an in-process orchestrator on a temporary SQLite database and one agent
connected to it over a real WebSocket, simulates the event (a push of the current
branch unless --event says otherwise), and prints every step and log line.

Changed files (for path filters) are the uncommitted changes plus the last commit,
unless --files names them. The local agent accepts every runs_on label the
workflows ask for, unless --strict-labels.

On a terminal the output is in colour unless NO_COLOR is set (https://no-color.org).

Exit status: 0 when every run passed, 1 when one failed, 2 on usage errors or
when no workflow matches (the decision traces are printed).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Dir = "."
			if len(args) == 1 {
				o.Dir = args[0]
			}
			o.Event.Name = kiln.EventName(event)
			o.Inputs = map[string]string{}
			for _, kv := range inputs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageErrorf("--input wants NAME=VALUE, got %q", kv)
				}
				o.Inputs[k] = v
			}
			if len(inputs) > 0 && o.Event.Name != kiln.EventDispatch {
				return usageErrorf("--input belongs to --event dispatch")
			}
			if filesSet = cmd.Flags().Changed("files"); filesSet {
				o.Event.Files = files
				if o.Event.Files == nil {
					o.Event.Files = []string{}
				}
			}
			for _, kv := range o.Env {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return usageErrorf("--env wants NAME=VALUE, got %q", kv)
				}
			}
			o.Out, o.Err = e.stdout, e.stderr
			o.Colour = wantColour(isTerminal(e.stdout) && !o.JSON, e.getenv)
			o.Safe = func(s string) string { return terminalSafe(s, o.Colour) }
			code, err := localrun.Run(cmd.Context(), o)
			switch {
			case errors.Is(err, localrun.ErrUsage):
				return usageErrorf("%v", strings.TrimPrefix(err.Error(), "usage\n"))
			case err != nil:
				return &exitError{code: ExitFailure, err: err}
			case code != 0:
				return &exitError{code: code}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&event, "event", "push", "the event to simulate: push, pull_request, tag or dispatch")
	fl.StringVar(&o.Event.Base, "base", "main", "pull_request: the target branch")
	fl.StringVar(&o.Event.Tag, "tag", "", "tag: the tag name")
	fl.StringArrayVar(&inputs, "input", nil, "dispatch: NAME=VALUE (repeatable)")
	fl.StringSliceVar(&o.Jobs, "job", nil, "run only this job and the jobs it needs (repeatable)")
	fl.StringSliceVar(&files, "files", nil, "the changed files for path filters (comma-separated)")
	fl.BoolVar(&o.StrictLabels, "strict-labels", false, "the local agent offers only local, its OS and architecture")
	fl.StringSliceVar(&o.Workflows, "workflow", nil, "run only this workflow: its file name (ci.yml), without .yml, or its name (repeatable)")
	fl.StringArrayVar(&o.Env, "env", nil, "NAME=VALUE added to every step's environment; the workflow's env wins (repeatable)")
	fl.BoolVar(&o.JSON, "json", false, "print the result as JSON on stdout (the progress goes to stderr)")
	fl.BoolVarP(&o.Verbose, "verbose", "v", false, "also print the orchestrator's and the agent's logs, and every checkout line")
	return cmd
}
