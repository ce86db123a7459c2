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
			// One read returns at most a limit of lines. Without --limit,
			// one step's log is read page after page (after the last seq),
			// and a read of several steps that fills its limit says so
			// (B130): a log is never cut short silently.
			paging := !q.Follow && q.Limit == 0 && q.Job != "" && q.Step != nil
			limit := q.Limit
			if !q.Follow && limit == 0 {
				limit = logReadLimit
				q.Limit = limit
			}
			var n int
			var last api.LogLine
			emit := func(l api.LogLine) error {
				n++
				last = l
				switch {
				case asJSON:
					b, _ := json.Marshal(l)
					out.Write(append(b, '\n'))
				case prefix:
					fmt.Fprintf(out, "%s/%s | %s\n", terminalSafe(l.Job, false), terminalSafe(or(l.StepName), false), terminalSafe(l.Text, colour))
				default:
					fmt.Fprintln(out, terminalSafe(l.Text, colour))
				}
				return nil
			}
			if q.Follow {
				// What arrived together is printed together: one write per
				// burst of lines, before the next wait for more.
				q.Idle = out.Flush
			}
			for {
				n = 0
				err = c.Logs(cmd.Context(), args[0], q, emit)
				if err != nil || !paging || n < limit {
					break
				}
				q.After = last.Seq
			}
			if err == nil && !q.Follow && !paging && n >= limit && limit > 0 {
				fmt.Fprintf(e.stderr, "kiln: stopped after %d lines, the limit of one read; the log goes on after %s step %d line %d: "+
					"read one step at a time (JOB --step N reads all of it) or give a larger --limit (at most %d)\n",
					n, terminalSafe(last.Job, false), last.Step, last.Seq, logMaxLimit)
			}
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
	fs.IntVar(&q.Limit, "limit", 0, "at most this many lines (without --follow; default 10000, and all of one step's with JOB and --step)")
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
		// Only the scaler's side: the rest of the timeline (delivery,
		// trigger, releases, dispatches) is kiln runs show's.
		if !strings.HasPrefix(ev.Type, "scaler.") && !strings.HasPrefix(ev.Type, "agent.") {
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

// The API's limits on one log read: its default, which the CLI asks for
// explicitly so it knows when a read was full, and its maximum.
const (
	logReadLimit = 10000
	logMaxLimit  = 100000
)
