package cli

import (
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kilnci/kiln/internal/server"
)

func newServerCmd(e *env) *cobra.Command {
	var configFile string
	var sets []string
	cfg := server.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the kiln server: webhooks, API, agents, runs",
		Long: `Run the kiln server. With no configuration it keeps everything in ./kiln-data
(SQLite, step logs), listens on 127.0.0.1:4000 and starts one local agent; on
its first start it prints an admin token for the CLI and the API.

Settings come from, in increasing precedence: defaults, the YAML file given with
--config, KILN_* environment variables (KILN_AGENTS_ACK_TIMEOUT=5s), and flags.
--set KEY=VALUE sets any key (docs/configuration.md lists them all).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flags := cfg // values the flags wrote
			cfg := server.DefaultConfig()
			if configFile != "" {
				if err := cfg.LoadFile(configFile); err != nil {
					return usageErrorf("%v", err)
				}
			}
			if err := cfg.LoadEnv(e.getenv); err != nil {
				return usageErrorf("%v", err)
			}
			fl := cmd.Flags()
			if fl.Changed("listen") {
				cfg.Listen = flags.Listen
			}
			if fl.Changed("data-dir") {
				cfg.DataDir = flags.DataDir
			}
			if fl.Changed("database") {
				cfg.Database = flags.Database
			}
			if fl.Changed("local-agents") {
				cfg.LocalAgents = flags.LocalAgents
			}
			for _, kv := range sets {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return usageErrorf("--set wants KEY=VALUE, got %q", kv)
				}
				if err := cfg.Set(k, v); err != nil {
					return usageErrorf("--set %v", err)
				}
			}
			if err := cfg.Validate(); err != nil {
				return usageErrorf("configuration: %v", err)
			}
			undumpable(slog.New(slog.NewTextHandler(e.stderr, nil))) // it holds the database and tokens
			return server.Run(cmd.Context(), cfg, server.Options{Out: e.stdout})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configFile, "config", "", "a YAML configuration file")
	fl.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to listen on")
	fl.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the database, logs and agent state")
	fl.StringVar(&cfg.Database, "database", "", "postgres://… (default: SQLite in the data directory)")
	fl.IntVar(&cfg.LocalAgents, "local-agents", cfg.LocalAgents, "agents to run on this host; 0 for none")
	fl.StringArrayVar(&sets, "set", nil, "KEY=VALUE for any configuration key (repeatable)")
	return cmd
}
