package cli

import (
	"fmt"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/spf13/cobra"
)

func newDispatchCmd(e *env) *cobra.Command {
	var cf clientFlags
	var req api.DispatchRequest
	var inputs []string
	var wait, asJSON bool
	cmd := &cobra.Command{
		Use:   "dispatch WORKFLOW",
		Short: "Start a workflow by hand",
		Long: `dispatch starts WORKFLOW (a file in .kiln/workflows, like deploy.yml) through its dispatch
trigger, with --input name=value for each input (the server checks them against the
workflow's declared types). It prints the numbers of the runs it started, and exits 1
when it started none (the reason goes to stderr). With --wait it also waits for the
runs to finish, with progress on stderr, and exits 1 unless they all succeed.`,
		Example: "  kiln dispatch deploy.yml --source app --input target=production\n" +
			"  kiln dispatch ci --source gh --repository acme/app --ref release/1.2 --wait",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Workflow = args[0]
			if req.Source == "" {
				return usageErrorf("name the source with --source (kiln sources list shows them)")
			}
			req.Inputs = map[string]any{}
			for _, in := range inputs {
				k, v, ok := strings.Cut(in, "=")
				if !ok || strings.TrimSpace(k) == "" {
					return usageErrorf("--input %q is not name=value", in)
				}
				req.Inputs[strings.TrimSpace(k)] = v
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "dispatching %s on %s…\n", req.Workflow, req.Source)
			d, err := c.Dispatch(cmd.Context(), req, true)
			if err != nil {
				return apiError(err)
			}
			return finishDelivery(cmd, e, c, d, wait, asJSON, false)
		},
	}
	addClientFlags(cmd, &cf)
	fs := cmd.Flags()
	fs.StringVar(&req.Source, "source", "", "the source whose repository holds the workflow (required)")
	fs.StringVar(&req.Repository, "repository", "", "the repository (owner/name); default: the source's")
	fs.StringVar(&req.Ref, "ref", "", "the branch or tag to run; default: the default branch")
	fs.StringArrayVar(&inputs, "input", nil, "an input as name=value (repeat for each)")
	fs.BoolVar(&wait, "wait", false, "wait for the runs to finish; exit 1 unless they all succeed")
	fs.BoolVar(&asJSON, "json", false, "print the event (and with --wait the finished runs) as JSON")
	return cmd
}

// finishDelivery reports a processed dispatch or trigger: the runs it
// started on stdout, or why it started none (exit 1); with wait, the runs'
// progress until they finish. noMatchOK: an event no workflow matched is
// not an error (a push to a branch nothing runs on).
func finishDelivery(cmd *cobra.Command, e *env, c *api.Client, d api.Delivery, wait, asJSON, noMatchOK bool) error {
	if d.Status == kiln.DeliveryReceived {
		fmt.Fprintf(e.stderr, "event %d was recorded but not processed yet; see kiln events %d\n", d.ID, d.ID)
		if asJSON {
			return printJSON(e.stdout, d)
		}
		return failed()
	}
	if len(d.Runs) == 0 {
		if asJSON {
			if err := printJSON(e.stdout, d); err != nil {
				return err
			}
		}
		if noMatchOK && d.Status == kiln.DeliveryNoMatch {
			fmt.Fprintf(e.stderr, "no run started (event %d): %s\n", d.ID, d.Message)
			return nil
		}
		return &exitError{code: ExitFailure, err: fmt.Errorf("no run started (event %d, %s): %s", d.ID, d.Status, d.Message)}
	}
	fmt.Fprintf(e.stderr, "event %d started run %s\n", d.ID, runNumbers(d.Runs))
	if !asJSON {
		for _, r := range d.Runs {
			fmt.Fprintf(e.stdout, "#%d\n", r.Number)
		}
	}
	if !wait {
		if asJSON {
			return printJSON(e.stdout, d)
		}
		return nil
	}
	ok, err := waitRuns(cmd.Context(), e, c, d.Runs)
	if err != nil {
		return err
	}
	if asJSON {
		var runs []api.Run
		for _, r := range d.Runs {
			run, err := c.GetRun(cmd.Context(), r.ID)
			if err != nil {
				return apiError(err)
			}
			runs = append(runs, run)
		}
		if err := printJSON(e.stdout, map[string]any{"event": d, "runs": runs}); err != nil {
			return err
		}
	}
	if !ok {
		return failed()
	}
	return nil
}
