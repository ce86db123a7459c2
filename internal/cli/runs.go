package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/spf13/cobra"
)

func newRunsCmd(e *env) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, show, cancel, rerun and approve runs",
		Long:  "runs works on the runs of a kiln server. A run is named by its number (12 or #12) or its id.",
		Args:  cobra.NoArgs,
	}
	addClientFlags(cmd, &cf)
	cmd.AddCommand(newRunsListCmd(e, &cf), newRunsShowCmd(e, &cf), newRunsCancelCmd(e, &cf), newRunsRerunCmd(e, &cf),
		newRunsApproveCmd(e, &cf))
	return cmd
}

func newRunsListCmd(e *env, cf *clientFlags) *cobra.Command {
	var f api.RunFilter
	var status string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List runs, newest first",
		Example: "  kiln runs list\n  kiln runs list --status failed --workflow ci --limit 10",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			f.Status = kiln.RunStatus(status)
			list, err := c.ListRuns(cmd.Context(), f)
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, list)
			}
			printRuns(e.stdout, list.Runs)
			if list.NextBefore > 0 {
				fmt.Fprintf(e.stderr, "more: kiln runs list --before %d\n", list.NextBefore)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&status, "status", "", "only runs in this status: pending, running, cancelling, success, failed, cancelled")
	fs.StringVar(&f.Workflow, "workflow", "", "only runs of this workflow")
	fs.StringVar(&f.Repository, "repository", "", "only runs of this repository (owner/name)")
	fs.IntVar(&f.Limit, "limit", 20, "at most this many runs (up to 1000)")
	fs.Int64Var(&f.Before, "before", 0, "only runs numbered below this (the next page)")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printRuns(w io.Writer, runs []api.Run) {
	tw := newTable(w)
	fmt.Fprintln(tw, "RUN\tSTATUS\tWORKFLOW\tTRIGGER\tREF\tSHA\tCREATED\tTOOK")
	for _, r := range runs {
		fmt.Fprintf(tw, "#%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Number, r.Status, r.Workflow, or(string(r.Trigger)),
			or(shortRef(r.Ref)), or(shortSHA(r.SHA)), ago(&r.CreatedAt), took(r.StartedAt, r.FinishedAt))
	}
	tw.Flush()
}

func newRunsShowCmd(e *env, cf *clientFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "show RUN",
		Short:   "Show a run with its jobs and steps",
		Long:    "show prints a run, each job with its status, agent and (while it waits) why it waits, and each job's steps.",
		Example: "  kiln runs show 12\n  kiln runs show 12 --json | jq .trace",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			run, err := c.GetRun(cmd.Context(), args[0])
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, run)
			}
			printRun(e.stdout, run)
			tl, err := c.Timeline(cmd.Context(), run.ID)
			if err != nil {
				return apiError(err)
			}
			printTimeline(e.stdout, tl)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (with the event, inputs and trigger decision)")
	return cmd
}

func printRun(w io.Writer, r api.Run) {
	fmt.Fprintf(w, "run #%d  %s  %s (%s)\n", r.Number, r.Status, r.Workflow, or(r.WorkflowFile))
	fmt.Fprintf(w, "source %s  repository %s  trigger %s", or(r.Source), or(r.Repository), or(string(r.Trigger)))
	if r.Actor != "" {
		fmt.Fprintf(w, " by %s", r.Actor)
	}
	fmt.Fprintf(w, "\nref %s  sha %s\n", or(r.Ref), or(r.SHA))
	fmt.Fprintf(w, "created %s  started %s  finished %s  took %s\n", ago(&r.CreatedAt), ago(r.StartedAt), ago(r.FinishedAt), took(r.StartedAt, r.FinishedAt))
	printFork(w, r)
	if r.RerunOf != "" {
		fmt.Fprintf(w, "reruns %s\n", r.RerunOf)
	}
	if r.CancelReason != "" {
		fmt.Fprintf(w, "cancelled: %s\n", r.CancelReason)
	}
	if r.FailureReason != "" {
		fmt.Fprintf(w, "failed: %s\n", r.FailureReason)
	}
	if r.ReportNote != "" {
		fmt.Fprintf(w, "forge report: %s\n", safeField(r.ReportNote))
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "JOB / STEP\tSTATUS\tAGENT / EXIT\tTOOK\tDETAIL")
	for _, j := range r.Jobs {
		detail := j.Error
		if j.PendingReason != "" {
			detail = fmt.Sprintf("waiting %s: %s", strings.TrimSuffix(ago(j.PendingSince), " ago"), reasonText(j.PendingReason, j.PendingSince))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", j.Name, j.Status, or(j.AgentID), took(j.StartedAt, j.FinishedAt), safeField(firstLine(detail)))
		for _, s := range j.Steps {
			exit := "-"
			if s.ExitCode != nil {
				exit = fmt.Sprintf("exit %d", *s.ExitCode)
			}
			fmt.Fprintf(tw, "  %d %s\t%s\t%s\t%s\t%s\n", s.Index, s.Name, s.Status, exit, took(s.StartedAt, s.FinishedAt), s.Error)
		}
	}
	tw.Flush()
}

func newRunsCancelCmd(e *env, cf *clientFlags) *cobra.Command {
	var reason string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run: gracefully, or forced when asked a second time",
		Long: `cancel stops a run. The first cancel is graceful: waiting jobs are cancelled at once and
agents get a signal and a grace period to stop their jobs. Cancelling a run that is still
cancelling forces it: agents kill their jobs at once and the run ends now.`,
		Example: "  kiln runs cancel 12\n  kiln runs cancel 12 --reason 'wrong branch'",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			res, err := c.CancelRun(cmd.Context(), args[0], reason)
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, res)
			}
			switch {
			case res.Forced:
				fmt.Fprintf(e.stdout, "run #%d %s (forced: agents were told to kill its jobs now)\n", res.Run.Number, res.Run.Status)
			case res.Run.Status.Terminal():
				fmt.Fprintf(e.stdout, "run #%d %s (no job was running)\n", res.Run.Number, res.Run.Status)
			default:
				fmt.Fprintf(e.stdout, "run #%d %s (graceful: agents were asked to stop; cancel again to force)\n", res.Run.Number, res.Run.Status)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, shown on the run")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newRunsRerunCmd(e *env, cf *clientFlags) *cobra.Command {
	var failedOnly, wait, asJSON bool
	cmd := &cobra.Command{
		Use:   "rerun RUN",
		Short: "Start a new run of a finished run, or of its failed jobs",
		Long: `rerun starts a new run of a finished run's workflow on the same commit, event and inputs.
With --failed only the failed and cancelled jobs run again, with the jobs that depend on
them; the others keep their results. With --wait it waits for the new run (progress on
stderr) and exits 1 unless it succeeds.`,
		Example: "  kiln runs rerun 12\n  kiln runs rerun 12 --failed --wait",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			run, err := c.RerunRun(cmd.Context(), args[0], failedOnly)
			if err != nil {
				return apiError(err)
			}
			if asJSON && !wait {
				return printJSON(e.stdout, run)
			}
			what := "all jobs"
			if failedOnly {
				what = "failed jobs only"
			}
			fmt.Fprintf(e.stderr, "run #%d reruns %s (%s)\n", run.Number, args[0], what)
			if !asJSON {
				fmt.Fprintf(e.stdout, "#%d\n", run.Number)
			}
			if !wait {
				return nil
			}
			ok, err := waitRuns(cmd.Context(), e, c, []api.RunRef{{ID: run.ID, Number: run.Number}})
			if err != nil {
				return err
			}
			if asJSON {
				final, err := c.GetRun(cmd.Context(), run.ID)
				if err != nil {
					return apiError(err)
				}
				if err := printJSON(e.stdout, final); err != nil {
					return err
				}
			}
			if !ok {
				return failed()
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&failedOnly, "failed", false, "rerun only the failed and cancelled jobs and their dependents")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the new run to finish; exit 1 unless it succeeds")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the new run as JSON")
	return cmd
}
