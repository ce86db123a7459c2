package cli

import (
	"fmt"

	"github.com/kilnci/kiln/internal/api"
	"github.com/spf13/cobra"
)

func newTriggerCmd(e *env) *cobra.Command {
	var cf clientFlags
	var req api.TriggerRequest
	var wait, asJSON bool
	cmd := &cobra.Command{
		Use:   "trigger SOURCE",
		Short: "Tell kiln a local source's branch or tag moved",
		Long: `trigger runs the workflows of a local source (a git repository on the server's host)
for a push: --ref is the branch or tag (default: the repository's HEAD branch), --sha the
new commit (default: what the ref names now), --before the previous one (for changed
files). The post-receive hook of "kiln sources hook" calls it with all three.

It prints the numbers of the runs it started. With --wait it also waits for them to
finish, with progress on stderr, and exits 1 unless they all succeed.`,
		Example: "  kiln trigger app\n  kiln trigger app --ref main --wait\n" +
			"  kiln trigger app --ref refs/heads/main --sha 9fceb02… --before 3f1a7c2…",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			what := req.Ref
			if what == "" {
				what = "HEAD"
			}
			fmt.Fprintf(e.stderr, "triggering %s at %s…\n", args[0], what)
			d, err := c.Trigger(cmd.Context(), args[0], req, true)
			if err != nil {
				return apiError(err)
			}
			return finishDelivery(cmd, e, c, d, wait, asJSON, true)
		},
	}
	addClientFlags(cmd, &cf)
	fs := cmd.Flags()
	fs.StringVar(&req.Ref, "ref", "", "the branch or tag that moved")
	fs.StringVar(&req.SHA, "sha", "", "its new commit")
	fs.StringVar(&req.Before, "before", "", "its previous commit")
	fs.BoolVar(&wait, "wait", false, "wait for the runs to finish; exit 1 unless they all succeed")
	fs.BoolVar(&asJSON, "json", false, "print the event as JSON")
	return cmd
}
