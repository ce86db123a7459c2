package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/spf13/cobra"
)

func newLogsCmd(e *env) *cobra.Command {
	var cf clientFlags
	var q api.LogQuery
	var step int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "logs RUN [JOB]",
		Short: "Print a run's logs, or follow them live",
		Long: `logs prints the log lines of a run's jobs (every job, or JOB, a job's name or id), step by
step. Lines are prefixed with job/step when more than one step is shown. Only each job's
latest attempt is printed.

With --follow it prints the history and then new lines as they arrive, until the jobs
finish; it then says on stderr how they ended and exits 1 if one did not succeed.`,
		Example: "  kiln logs 12\n  kiln logs 12 build --follow\n  kiln logs 12 'test (1.26, sqlite)' --step 2",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			if len(args) == 2 {
				q.Job = args[1]
			}
			if cmd.Flags().Changed("step") {
				q.Step = &step
			}
			if q.After > 0 && (q.Job == "" || q.Step == nil) {
				return usageErrorf("--after needs JOB and --step: sequence numbers count within one step")
			}
			prefix := q.Job == "" || q.Step == nil
			colour := isTerminal(e.stdout)
			out := bufio.NewWriter(e.stdout)
			if !asJSON && q.Step == nil && q.After == 0 {
				if err := printProvisioning(cmd, c, out, args[0], q.Job); err != nil {
					return err
				}
			}
			err = c.Logs(cmd.Context(), args[0], q, func(l api.LogLine) error {
				switch {
				case asJSON:
					b, _ := json.Marshal(l)
					out.Write(append(b, '\n'))
				case prefix:
					fmt.Fprintf(out, "%s/%s | %s\n", terminalSafe(l.Job, false), terminalSafe(or(l.StepName), false), terminalSafe(l.Text, colour))
				default:
					fmt.Fprintln(out, terminalSafe(l.Text, colour))
				}
				if q.Follow {
					return out.Flush()
				}
				return nil
			})
			if ferr := out.Flush(); err == nil {
				err = ferr
			}
			if err != nil {
				return apiError(err)
			}
			if !q.Follow {
				return nil
			}
			return reportJobs(cmd, e, c, args[0], q.Job)
		},
	}
	addClientFlags(cmd, &cf)
	fs := cmd.Flags()
	fs.BoolVarP(&q.Follow, "follow", "f", false, "print new lines as they arrive, until the jobs finish")
	fs.IntVar(&step, "step", 0, "only this step (its index; -1 is the checkout)")
	fs.Uint64Var(&q.After, "after", 0, "only lines after this sequence number (with JOB and --step)")
	fs.IntVar(&q.Limit, "limit", 0, "at most this many lines (without --follow; default 10000)")
	fs.BoolVar(&asJSON, "json", false, "print each line as a JSON object")
	return cmd
}

// printProvisioning prints the provisioning section: what the scalers did
// to start the agents of the run's jobs (or JOB's), as job/provisioning
// lines before the steps' logs.
func printProvisioning(cmd *cobra.Command, c *api.Client, out *bufio.Writer, run, job string) error {
	tl, err := c.Timeline(cmd.Context(), run)
	if err != nil {
		return apiError(err)
	}
	for _, ev := range tl.Events {
		if job != "" && ev.Job != job && ev.JobID != job {
			continue
		}
		for _, l := range strings.Split(ev.Detail, "\n") {
			fmt.Fprintf(out, "%s/provisioning | %s %s\n", terminalSafe(or(ev.Job), false), ev.Type, terminalSafe(l, false))
		}
	}
	return nil
}

// reportJobs says on stderr how the followed jobs ended; exit 1 if one
// did not succeed.
func reportJobs(cmd *cobra.Command, e *env, c *api.Client, run, job string) error {
	r, err := c.GetRun(cmd.Context(), run)
	if err != nil {
		return apiError(err)
	}
	ok := true
	for _, j := range r.Jobs {
		if job != "" && j.Name != job && j.ID != job && j.Base != job {
			continue
		}
		fmt.Fprintf(e.stderr, "run #%d job %s %s\n", r.Number, terminalSafe(j.Name, false), j.Status)
		if j.Result != kiln.ResultSuccess && j.Result != kiln.ResultSkipped {
			ok = false
		}
	}
	if !ok {
		return failed()
	}
	return nil
}
