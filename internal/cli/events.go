package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kilnci/kiln/internal/api"
	"github.com/spf13/cobra"
)

func newEventsCmd(e *env) *cobra.Command {
	var cf clientFlags
	var f api.EventFilter
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "events [ID]",
		Short: "Show the event log: every webhook, trigger and dispatch and what came of it",
		Long: `events lists the event log, newest first: each delivery kiln received, its outcome and
the runs it started. With an ID it shows that event with its body.`,
		Example: "  kiln events\n  kiln events --status failed --limit 5\n  kiln events 42",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				id, err := strconv.ParseInt(strings.TrimPrefix(args[0], "#"), 10, 64)
				if err != nil || id < 1 {
					return usageErrorf("event %q: events are numbered", args[0])
				}
				d, err := c.Event(cmd.Context(), id)
				if err != nil {
					return apiError(err)
				}
				if asJSON {
					return printJSON(e.stdout, d)
				}
				return printEvent(e, d)
			}
			list, err := c.Events(cmd.Context(), f)
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, list)
			}
			tw := newTable(e.stdout)
			fmt.Fprintln(tw, "ID\tSOURCE\tKIND\tEVENT\tSTATUS\tRUNS\tRECEIVED\tMESSAGE")
			cut := int64(0)
			for _, d := range list.Events {
				msg := clip(d.Message, 60)
				if msg != d.Message && cut == 0 {
					cut = d.ID
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.ID, or(d.Source), or(d.Kind), or(d.Event), d.Status,
					len(d.RunIDs), ago(&d.ReceivedAt), msg)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if cut > 0 {
				fmt.Fprintf(e.stderr, "messages cut short (…): kiln events ID shows one whole, e.g. kiln events %d\n", cut)
			}
			if list.NextBefore > 0 {
				fmt.Fprintf(e.stderr, "more: kiln events --before %d\n", list.NextBefore)
			}
			return nil
		},
	}
	addClientFlags(cmd, &cf)
	fs := cmd.Flags()
	fs.StringVar(&f.Source, "source", "", "only events of this source")
	fs.StringVar(&f.Status, "status", "", "only events with this outcome: received, processed, duplicate, no_match, invalid_workflow, ignored, failed, ping")
	fs.IntVar(&f.Limit, "limit", 20, "at most this many events (up to 1000)")
	fs.Int64Var(&f.Before, "before", 0, "only events numbered below this (the next page)")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printEvent(e *env, d api.Delivery) error {
	fmt.Fprintf(e.stdout, "event %d  %s  %s %s from %s\n", d.ID, d.Status, or(d.Kind), or(d.Event), or(d.Source))
	fmt.Fprintf(e.stdout, "received %s  processed %s  attempts %d\n", ago(&d.ReceivedAt), ago(d.ProcessedAt), d.Attempts)
	if d.DeliveryID != "" {
		fmt.Fprintf(e.stdout, "delivery id %s\n", d.DeliveryID)
	}
	if len(d.Runs) > 0 {
		fmt.Fprintf(e.stdout, "runs %s\n", runNumbers(d.Runs))
	}
	if d.Message != "" {
		fmt.Fprintf(e.stdout, "\n%s\n", d.Message)
	}
	if len(d.Body) > 0 {
		fmt.Fprintln(e.stdout, "\nbody:")
		return printJSON(e.stdout, d.Body)
	}
	return nil
}

// clip shortens a message to its first line and at most n characters,
// cut at a word's end where there is one, marked with an ellipsis.
func clip(s string, n int) string {
	line, _, more := strings.Cut(s, "\n")
	r := []rune(line)
	if len(r) <= n && !more {
		return line
	}
	if len(r) > n-1 {
		r = r[:n-1]
		if i := strings.LastIndexByte(string(r), ' '); i > n/2 {
			r = []rune(strings.TrimRight(string(r)[:i], " ,;:"))
		}
	}
	return string(r) + "…"
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
