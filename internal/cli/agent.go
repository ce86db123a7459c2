package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent"
)

// agentFlags are the settings of `kiln agent`; each also comes from a
// KILN_AGENT_* environment variable, and a flag wins over its variable.
type agentFlags struct {
	server, token, id, labels, stateDir string
	logFormat                           string
	maxJobs                             int
}

var agentEnvNames = map[string]string{
	"server": "KILN_AGENT_SERVER", "token": "KILN_AGENT_TOKEN", "id": "KILN_AGENT_ID",
	"labels": "KILN_AGENT_LABELS", "max-jobs": "KILN_AGENT_MAX_JOBS", "state-dir": "KILN_AGENT_STATE_DIR",
	"log-format": "KILN_AGENT_LOG_FORMAT",
}

func newAgentCmd(e *env) *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run an agent: connect to the orchestrator and run the jobs it sends",
		Long: `Run an agent. It dials the orchestrator's WebSocket, registers with its labels
(plus its OS and architecture), and runs the jobs it is sent, reconnecting with
backoff when the connection drops. Its id is kept in the state directory.

The first SIGTERM or SIGINT drains the agent: running jobs finish, new ones are
refused, and it exits once the orchestrator has everything. A second signal
cancels the running jobs at once and exits.

Every flag can also be set with its environment variable; the flag wins:
  --server KILN_AGENT_SERVER     --token KILN_AGENT_TOKEN       --id KILN_AGENT_ID
  --labels KILN_AGENT_LABELS     --max-jobs KILN_AGENT_MAX_JOBS --state-dir KILN_AGENT_STATE_DIR
  --log-format KILN_AGENT_LOG_FORMAT`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := agentConfig(cmd, e, f)
			if err != nil {
				return err
			}
			return runAgent(cmd.Context(), cfg)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", "", "the orchestrator: ws(s)://host:port/ws, or http(s)://host:port")
	fl.StringVar(&f.token, "token", "", "the agent token (kat_…)")
	fl.StringVar(&f.id, "id", "", "the agent id (default: kept in the state directory, <hostname>-<random>)")
	fl.StringVar(&f.labels, "labels", "", "comma-separated labels; the OS and architecture are added")
	fl.IntVar(&f.maxJobs, "max-jobs", agent.DefaultMaxJobs, "jobs to run at once")
	fl.StringVar(&f.stateDir, "state-dir", "", "where the agent keeps its id (default $XDG_STATE_HOME/kiln-agent or ~/.local/state/kiln-agent)")
	fl.StringVar(&f.logFormat, "log-format", "text", "the agent's log on stderr: text or json")
	return cmd
}

// agentConfig merges flags and environment into an agent.Config.
func agentConfig(cmd *cobra.Command, e *env, f agentFlags) (agent.Config, error) {
	pick := func(flag, value string) string {
		if cmd.Flags().Changed(flag) {
			return value
		}
		return e.getenv(agentEnvNames[flag])
	}
	cfg := agent.Config{
		Server:   pick("server", f.server),
		Token:    pick("token", f.token),
		ID:       pick("id", f.id),
		StateDir: pick("state-dir", f.stateDir),
		MaxJobs:  f.maxJobs,
		Version:  Version,
	}
	switch format := pick("log-format", f.logFormat); format {
	case "", "text":
		cfg.Logger = slog.New(slog.NewTextHandler(e.stderr, nil))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(e.stderr, nil))
	default:
		return cfg, usageErrorf("log format %q is neither text nor json", format)
	}
	for _, l := range strings.Split(pick("labels", f.labels), ",") {
		if l = strings.TrimSpace(l); l != "" {
			cfg.Labels = append(cfg.Labels, l)
		}
	}
	if !cmd.Flags().Changed("max-jobs") {
		if v := e.getenv(agentEnvNames["max-jobs"]); v != "" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return cfg, usageErrorf("KILN_AGENT_MAX_JOBS=%q is not a number", v)
			}
			cfg.MaxJobs = n
		}
	}
	// The mistakes most likely on a first start are reported before the
	// state directory is looked for.
	if _, err := agent.ServerURL(cfg.Server); err != nil {
		return cfg, usageErrorf("%v", err)
	}
	if cfg.Token == "" {
		return cfg, usageErrorf("the agent token is missing (--token or KILN_AGENT_TOKEN)")
	}
	if cfg.MaxJobs < 1 { // 0 would mean the default to agent.Config
		return cfg, usageErrorf("max jobs must be at least 1, not %d", cfg.MaxJobs)
	}
	if cfg.StateDir == "" && cfg.ID == "" {
		dir, err := agent.DefaultStateDir(e.getenv)
		if err != nil {
			return cfg, usageErrorf("%v", err)
		}
		cfg.StateDir = dir
	}
	return cfg, nil
}

// runAgent runs the agent until it ends. The first SIGTERM or SIGINT (or the
// end of ctx, which is how main reports the first signal) drains it; the
// second signal is the hard stop.
func runAgent(ctx context.Context, cfg agent.Config) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	drain := make(chan struct{})
	cfg.Drain = drain
	hard, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		// main's signal context and sigs both see the first signal, so
		// only sigs is counted.
		signals, parent := 0, ctx.Done()
		for {
			select {
			case <-parent:
				parent = nil
			case <-sigs:
				signals++
			case <-done:
				return
			}
			if drain != nil {
				close(drain)
				drain = nil
			}
			if signals >= 2 {
				stop()
			}
		}
	}()
	err := agent.Run(hard, cfg)
	switch {
	case err == nil:
		return nil
	case kiln.ErrorCode(err) == kiln.CodeInvalid:
		return usageErrorf("%s", kiln.ErrorMessage(err))
	}
	return &exitError{code: ExitFailure, err: fmt.Errorf("agent: %w", err)}
}
