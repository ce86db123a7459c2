package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newAgentsCmd(e *env) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "List agents and drain them",
		Args:  cobra.NoArgs,
	}
	addClientFlags(cmd, &cf)

	var asJSON bool
	list := &cobra.Command{
		Use:     "list",
		Short:   "List every agent kiln knows, connected or not",
		Example: "  kiln agents list\n  kiln agents list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			agents, err := c.Agents(cmd.Context())
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, agents)
			}
			tw := newTable(e.stdout)
			fmt.Fprintln(tw, "AGENT\tSTATE\tLABELS\tMANDATORY\tJOBS\tHOST\tVERSION\tSEEN\tSERVER")
			for _, a := range agents {
				jobs := "-"
				// max_jobs 0: a server that does not know it (an
				// agent registered before this version): say nothing
				// rather than a false 0/0.
				if a.Connected && a.MaxJobs > 0 {
					jobs = fmt.Sprintf("%d/%d", a.ActiveJobs, a.MaxJobs)
				}
				seen := a.LastHeartbeat
				if seen == nil {
					seen = a.LastSeen
				}
				// Hostname and version are what the agent says; nothing
				// it says may drive the terminal or break the table.
				server := "-"
				if a.Connected && a.Coordinator != "" {
					server = safeField(a.Coordinator)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safeField(a.ID), a.State, safeField(labels(a.Labels)), safeField(labels(a.Mandatory)),
					jobs, safeField(or(a.Hostname)), safeField(or(a.Version)), ago(seen), server)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	drain := &cobra.Command{
		Use:   "drain AGENT",
		Short: "Stop giving an agent new jobs; it finishes the ones it runs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			a, err := c.DrainAgent(cmd.Context(), args[0])
			if err != nil {
				return apiError(err)
			}
			fmt.Fprintf(e.stdout, "agent %s is draining: it finishes its %d running jobs and takes no new ones\n", safeField(a.ID), a.ActiveJobs)
			return nil
		},
	}
	cmd.AddCommand(list, drain)
	return cmd
}

// safeField is an agent-reported value made safe for one table cell:
// control characters escaped, and no tab to shift the columns.
func safeField(s string) string {
	return strings.ReplaceAll(terminalSafe(s, false), "\t", `\t`)
}
