package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kilnci/kiln/internal/server"
)

func newServerCmd(e *env) *cobra.Command {
	var configFile string
	var sets []string
	var cpuProfile, memProfile string
	cfg := server.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the kiln server: webhooks, API, agents, runs",
		Long: `Run the kiln server. With no configuration it keeps everything in ./kiln-data
(SQLite, step logs), listens on 127.0.0.1:4000 and starts one local agent; on
its first start it prints an admin token for the CLI and the API.

Settings come from, in increasing precedence: defaults, the YAML file given with
--config, KILN_* environment variables (KILN_AGENTS_ACK_TIMEOUT=5s), and flags.
--set KEY=VALUE sets any key (docs/configuration.md lists them all).
SIGHUP reads the configuration again and applies its scalers: and scaler_caps
without dropping running agents (docs/scalers.md); other changed settings are
logged as needing a restart.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flags := cfg // values the flags wrote
			fl := cmd.Flags()
			// load reads the configuration from its sources; SIGHUP reads
			// it again (B227).
			load := func() (server.Config, error) {
				cfg := server.DefaultConfig()
				if configFile != "" {
					if err := cfg.LoadFile(configFile); err != nil {
						return cfg, err
					}
				}
				if err := cfg.LoadEnv(e.getenv); err != nil {
					return cfg, err
				}
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
						return cfg, fmt.Errorf("--set wants KEY=VALUE, got %q", kv)
					}
					if err := cfg.Set(k, v); err != nil {
						return cfg, fmt.Errorf("--set %v", err)
					}
				}
				if err := cfg.Validate(); err != nil {
					return cfg, fmt.Errorf("configuration: %v", err)
				}
				return cfg, nil
			}
			cfg, err := load()
			if err != nil {
				return usageErrorf("%v", err)
			}
			undumpable(slog.New(slog.NewTextHandler(e.stderr, nil))) // it holds the database and tokens
			stopProfiles, err := startProfiles(cpuProfile, memProfile)
			if err != nil {
				return err
			}
			reload, stopReload := hangups()
			defer stopReload()
			err = server.Run(cmd.Context(), cfg, server.Options{Out: e.stdout, Reload: reload, LoadConfig: load})
			return errors.Join(err, stopProfiles())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configFile, "config", "", "a YAML configuration file")
	fl.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to listen on")
	fl.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the database, logs and agent state")
	fl.StringVar(&cfg.Database, "database", "", "postgres://… (default: SQLite in the data directory)")
	fl.IntVar(&cfg.LocalAgents, "local-agents", cfg.LocalAgents, "agents to run on this host; 0 for none")
	fl.StringArrayVar(&sets, "set", nil, "KEY=VALUE for any configuration key (repeatable)")
	// For `kiln bench --cpuprofile/--memprofile`: profiles of the whole
	// server life, written when it stops.
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the server's life to this file")
	fl.StringVar(&memProfile, "memprofile", "", "write a heap profile to this file when the server stops")
	_ = fl.MarkHidden("cpuprofile")
	_ = fl.MarkHidden("memprofile")
	return cmd
}

// hangups turns SIGHUP into reload requests for the server (B227): a
// signal arriving while a reload runs is kept, later ones merge into it.
func hangups() (<-chan struct{}, func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP)
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-sigs:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, func() { signal.Stop(sigs); close(done) }
}
