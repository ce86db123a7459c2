package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kilnci/kiln/internal/api"
)

func newScalersCmd(e *env) *cobra.Command {
	var cf clientFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "scalers",
		Short: "List the scalers: their agents, spawns, warm pools and last failure",
		Long: `scalers lists each configured scaler (docs/scalers.md): its type and labels, the agents it has
(spawning ones included) of its max_agents, its warm pool, how many spawns failed in a row,
the last failure and, while it backs off, when it spawns again.`,
		Example: "  kiln scalers\n  kiln scalers --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			scs, err := c.Scalers(cmd.Context())
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, scs)
			}
			printScalers(e.stdout, scs)
			return nil
		},
	}
	addClientFlags(cmd, &cf)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(newInitramfsCmd(e))
	return cmd
}

func printScalers(w io.Writer, scs []api.Scaler) {
	if len(scs) == 0 {
		fmt.Fprintln(w, "no scalers are configured (see docs/scalers.md)")
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "SCALER\tTYPE\tLABELS\tAGENTS\tSPAWNING\tWARM\tFAILURES\tLAST ERROR")
	for _, s := range scs {
		name := s.Name
		if s.Retiring {
			name += " (retiring)"
		}
		last := "-"
		if s.LastError != "" {
			last = firstLine(s.LastError) + " (" + ago(s.LastErrorAt) + ")"
			if s.RetryAt != nil {
				last += ", next spawn in " + short(time.Until(*s.RetryAt))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d/%d\t%d\t%s\n", name, s.Type, labels(s.Labels), s.ActiveAgents, s.MaxAgents,
			s.SpawnsInFlight, s.WarmReady, s.WarmTarget, s.ConsecutiveFailures, safeField(last))
	}
	tw.Flush()
}

// reasonText is a pending reason as a table shows it: its first line, and
// for a spawn how long it has been going.
func reasonText(reason string, since *time.Time) string {
	reason = firstLine(reason)
	if strings.HasPrefix(reason, "spawning an agent (") && strings.HasSuffix(reason, ")") && since != nil {
		return strings.TrimSuffix(reason, ")") + ", " + short(time.Since(*since)) + ")"
	}
	return reason
}

// printTimeline prints a run's timeline; a scaler failure's detail (with
// the agent's last output lines) and the trigger decision's checks in
// full, indented.
func printTimeline(w io.Writer, tl api.Timeline) {
	if len(tl.Events) == 0 {
		return
	}
	fmt.Fprintln(w, "\ntimeline:")
	for _, ev := range tl.Events {
		lines := strings.Split(ev.Detail, "\n")
		fmt.Fprintf(w, "  %s  %-20s %-10s %s\n", ev.At.Local().Format("15:04:05.000"), ev.Type, or(ev.Job), safeField(lines[0]))
		if ev.Type == "scaler.failed" || ev.Type == api.EventTrigger {
			for _, l := range lines[1:] {
				fmt.Fprintf(w, "      %s\n", safeField(l))
			}
		}
	}
}
