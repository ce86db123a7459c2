package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kilnci/kiln/internal/bench"
)

func newBenchCmd(e *env) *cobra.Command {
	cfg := bench.DefaultConfig()
	var scenarios []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a real kiln server against the performance targets",
		Long: `bench starts kiln servers on loopback (SQLite in a temporary directory, or a scratch
database on the PostgreSQL server given with --database) and drives them with scripted agents
that speak the real protocol, then prints each number next to its target:

  startup   server exec → /ready; local agent spawned → registered
  webhook   signed GitHub push → job received by an idle agent (p50, p99)
  dispatch  no-op jobs per second through 10, 100 and 1,000 agents, with and without an
            equal backlog of jobs no agent can take; agent free → next job (p50, p99)
  logs      log lines per second from one agent and from several through the store to a
            live viewer, and a line's latency to the viewer (p99)
  idle      server memory and goroutines per idle connected agent

Progress goes to stderr, the table (or --json) to stdout. See docs/bench.md.`,
		Example: "  kiln bench\n  kiln bench --scenario webhook,dispatch --agents 100\n" +
			"  kiln bench --database postgres://kiln@127.0.0.1:5432/postgres --json > pg.json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Binary == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find the kiln binary to start as the server: %w", err)
				}
				cfg.Binary = exe
			}
			for _, s := range scenarios {
				for _, part := range strings.Split(s, ",") {
					if part = strings.TrimSpace(part); part != "" {
						cfg.Scenarios = append(cfg.Scenarios, part)
					}
				}
			}
			if err := cfg.Validate(); err != nil {
				return usageErrorf("%v", err)
			}
			cfg.Progress = e.stderr
			report, err := bench.Run(cmd.Context(), cfg)
			if report != nil && len(report.Results) > 0 {
				if asJSON {
					if jerr := printJSON(e.stdout, report); jerr != nil {
						return jerr
					}
				} else {
					bench.Print(e.stdout, report)
				}
			}
			if err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Database, "database", "", "postgres://… of a role that may CREATE DATABASE (default: SQLite)")
	fl.StringSliceVar(&scenarios, "scenario", nil, "scenarios to run: "+strings.Join(bench.Scenarios, ", ")+" (default all)")
	fl.IntVar(&cfg.Startups, "startups", cfg.Startups, "server starts timed (startup)")
	fl.IntVar(&cfg.Webhooks, "webhooks", cfg.Webhooks, "push deliveries timed (webhook)")
	fl.IntSliceVar(&cfg.Agents, "agents", cfg.Agents, fmt.Sprintf("agent counts for dispatch (each ≤ %d)", bench.MaxAgents))
	fl.IntVar(&cfg.Jobs, "jobs", cfg.Jobs, "no-op jobs per agent count, rounded up to runs of 256 (dispatch)")
	fl.IntVar(&cfg.LogLines, "log-lines", cfg.LogLines, "lines each log agent sends (logs)")
	fl.IntVar(&cfg.LogAgents, "log-agents", cfg.LogAgents, "agents sending at once for the aggregate (logs)")
	fl.IntVar(&cfg.IdleAgents, "idle-agents", cfg.IdleAgents, fmt.Sprintf("idle agents connected (idle, ≤ %d)", bench.MaxAgents))
	fl.IntVar(&cfg.Spawns, "spawns", cfg.Spawns, "jobs each run on an agent a scaler starts (scaler; at most 5 on micro-VMs)")
	fl.StringVar(&cfg.MicroVMKernel, "microvm-kernel", "", "Debian's cloud kernel package unpacked (dpkg-deb -x) here: also time micro-VM spawns (scaler)")
	fl.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "limit per scenario")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fl.StringVar(&cfg.CPUProfile, "cpuprofile", "", "each server writes its CPU profile to PREFIX.<scenario>.<n> (go tool pprof)")
	fl.StringVar(&cfg.MemProfile, "memprofile", "", "each server writes its heap profile to PREFIX.<scenario>.<n> when it stops")
	fl.StringVar(&cfg.Binary, "server-binary", "", "kiln executable to start as the server (default: this one)")
	_ = fl.MarkHidden("server-binary")
	return cmd
}
