package cli

import (
	"fmt"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/spf13/cobra"
)

func newQueueCmd(e *env) *cobra.Command {
	var cf clientFlags
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "queue",
		Short:   "Show the jobs waiting for an agent and why",
		Long:    "queue lists every queued job, and every job of a run held for an admin's approval (a fork's\npull request: kiln runs approve N), with the labels it needs, why it waits and since when.",
		Example: "  kiln queue\n  kiln queue --json | jq '.waiting[] | .reason'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			q, err := c.Queue(cmd.Context(), limit)
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, q)
			}
			tw := newTable(e.stdout)
			fmt.Fprintln(tw, "JOB\tRUN\tWORKFLOW\tLABELS\tREASON\tSINCE")
			for _, w := range q.Waiting {
				need := labels(w.RunsOn)
				if len(w.ExcludeLabels) > 0 {
					need += " !" + strings.Join(w.ExcludeLabels, ",!")
				}
				fmt.Fprintf(tw, "%s\t#%d\t%s\t%s\t%s\t%s\n", w.Job, w.RunNumber, w.Workflow, need, safeField(or(reasonText(w.Reason, w.Since))), ago(w.Since))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			var parts []string
			for _, s := range kiln.JobStatuses {
				if n := q.Depth[s]; n > 0 {
					parts = append(parts, fmt.Sprintf("%d %s", n, s))
				}
			}
			if len(parts) == 0 {
				parts = []string{"nothing unfinished"}
			}
			fmt.Fprintf(e.stdout, "\njobs: %s\n", strings.Join(parts, ", "))
			return nil
		},
	}
	addClientFlags(cmd, &cf)
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many waiting jobs (default 100)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
