package cli

import (
	"fmt"
	"io"

	"github.com/kilnci/kiln/internal/api"
	"github.com/spf13/cobra"
)

func newRunsApproveCmd(e *env, cf *clientFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "approve RUN",
		Short: "Let a run held for approval (a fork pull request's) run",
		Long: `approve releases the jobs of a run held for approval: the run of a pull request from a
fork whose author is not one of the repository's owners, members or collaborators, under
its source's default fork policy (docs/security.md). kiln records who approved it (the
name of your admin token) and when; kiln runs show prints both. Read the pull request's
changes, workflows included, before you approve: its code runs on your agents.

To reject the run instead, cancel it: kiln runs cancel RUN.`,
		Example: "  kiln runs approve 12",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			run, err := c.ApproveRun(cmd.Context(), args[0])
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, run)
			}
			fmt.Fprintf(e.stdout, "run #%d approved by %s; its jobs are released\n", run.Number, run.Approval.ApprovedBy)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printFork prints where a fork's run comes from and its approval.
func printFork(w io.Writer, r api.Run) {
	if f := r.Fork; f != nil {
		head := or(f.HeadRepository)
		fmt.Fprintf(w, "pull request from fork %s by %s", terminalSafeText(head), terminalSafeText(or(f.Author)))
		if f.AuthorAssociation != "" {
			fmt.Fprintf(w, " (%s)", terminalSafeText(f.AuthorAssociation))
		}
		fmt.Fprintln(w)
	}
	a := r.Approval
	if a == nil {
		return
	}
	switch a.State {
	case api.ApprovalWaiting:
		fmt.Fprintf(w, "%s\n  approve: kiln runs approve %d   reject: kiln runs cancel %d\n", terminalSafeText(a.Reason), r.Number, r.Number)
	case api.ApprovalApproved:
		fmt.Fprintf(w, "approved by %s %s\n", terminalSafeText(a.ApprovedBy), ago(a.ApprovedAt))
	default:
		fmt.Fprintf(w, "rejected: cancelled while %s\n", terminalSafeText(a.Reason))
	}
}

// terminalSafeText is terminalSafe without colour, for one-line metadata.
func terminalSafeText(s string) string { return terminalSafe(s, false) }
