package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent"
	"github.com/kilnci/kiln/internal/executor"
)

// agentFlags are the settings of `kiln agent`; each also comes from a
// KILN_AGENT_* environment variable, and a flag wins over its variable.
type agentFlags struct {
	server, token, tokenFile, id, labels, stateDir string
	claim                                          string
	logFormat                                      string
	maxJobs                                        int
	isolation, stepUser, workDir                   string
	hide                                           []string
}

var agentEnvNames = map[string]string{
	"server": "KILN_AGENT_SERVER", "token": "KILN_AGENT_TOKEN", "token-file": "KILN_AGENT_TOKEN_FILE", "id": "KILN_AGENT_ID",
	"labels": "KILN_AGENT_LABELS", "max-jobs": "KILN_AGENT_MAX_JOBS", "state-dir": "KILN_AGENT_STATE_DIR",
	"log-format": "KILN_AGENT_LOG_FORMAT", "isolation": "KILN_AGENT_ISOLATION", "hide": "KILN_AGENT_HIDE",
	"step-user": "KILN_AGENT_STEP_USER", "work-dir": "KILN_AGENT_WORK_DIR", "claim": "KILN_AGENT_CLAIM",
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

Steps are isolated from the agent (--isolation auto, the default): each runs in
its own PID, mount and user namespaces, cannot see or signal the agent or any
other process of the host, and cannot read the state directory, the token file
or the paths given with --hide (hide the server's data directory when the
server shares this host). Where the host cannot do that, the agent says so
when it starts; --isolation required refuses to start instead. See
docs/security.md.

Give the token in a private file (--token-file, mode 0600) or the environment:
a --token on the command line is visible to every user of the host.

An agent an event scaler asked for is started with --claim CODE (the
claim_code of the scale-up webhook) instead of a token: it exchanges the
code, once, for its id, labels and a single-use token, and takes one job.
See docs/scalers.md.

Every flag can also be set with its environment variable; the flag wins:
  --server KILN_AGENT_SERVER     --token-file KILN_AGENT_TOKEN_FILE  --token KILN_AGENT_TOKEN
  --id KILN_AGENT_ID             --labels KILN_AGENT_LABELS          --max-jobs KILN_AGENT_MAX_JOBS
  --state-dir KILN_AGENT_STATE_DIR  --work-dir KILN_AGENT_WORK_DIR   --log-format KILN_AGENT_LOG_FORMAT
  --isolation KILN_AGENT_ISOLATION  --hide KILN_AGENT_HIDE (paths separated by ':')
  --step-user KILN_AGENT_STEP_USER  --claim KILN_AGENT_CLAIM`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := agentConfig(cmd, e, f)
			if err != nil {
				return err
			}
			if code := claimCode(cmd, e, f); code != "" {
				if err := redeemClaim(cmd.Context(), &cfg, code); err != nil {
					return err
				}
			}
			return runAgent(cmd.Context(), cfg)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", "", "the orchestrator: ws(s)://host:port/ws, or http(s)://host:port")
	fl.StringVar(&f.token, "token", "", "the agent token (kat_…); visible to every local user, prefer --token-file")
	fl.StringVar(&f.tokenFile, "token-file", "", "a file only the agent's user can read (0600) holding the agent token")
	fl.StringVar(&f.id, "id", "", "the agent id (default: kept in the state directory, <hostname>-<random>)")
	fl.StringVar(&f.labels, "labels", "", "comma-separated labels; the OS and architecture are added")
	fl.IntVar(&f.maxJobs, "max-jobs", agent.DefaultMaxJobs, "jobs to run at once")
	fl.StringVar(&f.stateDir, "state-dir", "", "where the agent keeps its id and job directories (default $XDG_STATE_HOME/kiln-agent or ~/.local/state/kiln-agent)")
	fl.StringVar(&f.workDir, "work-dir", "", "where job directories are made (default work/ in the state directory)")
	fl.StringVar(&f.isolation, "isolation", string(executor.IsolationAuto), "isolate steps from the agent and the host: auto, required or off")
	fl.StringArrayVar(&f.hide, "hide", nil, "a path steps must not see, such as the server's data directory (repeatable)")
	fl.StringVar(&f.stepUser, "step-user", "", "run steps as this user (a name or uid[:gid]) instead of the agent's; needs a root agent")
	fl.StringVar(&f.logFormat, "log-format", "text", "the agent's log on stderr: text or json")
	fl.StringVar(&f.claim, "claim", "", "an event scaler's claim code (kcl_…): redeemed for the agent's id, labels and token")
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
		Server:    pick("server", f.server),
		Token:     pick("token", f.token),
		TokenFile: pick("token-file", f.tokenFile),
		ID:        pick("id", f.id),
		StateDir:  pick("state-dir", f.stateDir),
		MaxJobs:   f.maxJobs,
		Version:   buildVersion(),
	}
	if cfg.TokenFile != "" && cmd.Flags().Changed("token-file") {
		cfg.Token = "" // the flag wins over KILN_AGENT_TOKEN
	}
	switch format := pick("log-format", f.logFormat); format {
	case "", "text":
		cfg.Logger = slog.New(slog.NewTextHandler(e.stderr, nil))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{ReplaceAttr: durationText}))
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
	claim := claimCode(cmd, e, f)
	switch {
	case claim != "" && (cfg.Token != "" || cfg.TokenFile != "" || cfg.ID != "" || len(cfg.Labels) > 0):
		return cfg, usageErrorf("--claim gives the agent its token, id and labels: drop --token, --token-file, --id and --labels")
	case claim == "" && cfg.Token == "" && cfg.TokenFile == "":
		return cfg, usageErrorf("the agent token is missing (--token-file, KILN_AGENT_TOKEN or --token), or an event scaler's claim code (--claim)")
	}
	if cmd.Flags().Changed("token") {
		cfg.Logger.Warn("the agent token is on the command line, where every user of this host can read it (ps); use --token-file or KILN_AGENT_TOKEN")
	}
	if cfg.MaxJobs < 1 { // 0 would mean the default to agent.Config
		return cfg, usageErrorf("max jobs must be at least 1, not %d", cfg.MaxJobs)
	}
	if cfg.StateDir == "" {
		// The state directory also holds the work root, so an agent with
		// an --id has one too when the environment names a place for it.
		dir, err := agent.DefaultStateDir(e.getenv)
		if err != nil && cfg.ID == "" && claim == "" {
			return cfg, usageErrorf("%v", err)
		}
		cfg.StateDir = dir
	}
	if err := agentIsolation(cmd, e, f, &cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// claimCode is --claim, else KILN_AGENT_CLAIM.
func claimCode(cmd *cobra.Command, e *env, f agentFlags) string {
	if cmd.Flags().Changed("claim") {
		return strings.TrimSpace(f.claim)
	}
	return strings.TrimSpace(e.getenv(agentEnvNames["claim"]))
}

// agentIsolation reads the flags that keep steps away from the agent.
func agentIsolation(cmd *cobra.Command, e *env, f agentFlags, cfg *agent.Config) error {
	pick := func(flag, value string) string {
		if v := e.getenv(agentEnvNames[flag]); v != "" && !cmd.Flags().Changed(flag) {
			return v
		}
		return value // the flag, or its default
	}
	mode, err := executor.ParseIsolationMode(pick("isolation", f.isolation))
	if err != nil {
		return usageErrorf("%v", err)
	}
	iso := executor.Isolation{Mode: mode, Hide: f.hide}
	if !cmd.Flags().Changed("hide") {
		iso.Hide = filepath.SplitList(e.getenv(agentEnvNames["hide"]))
	}
	for _, p := range iso.Hide {
		if !filepath.IsAbs(p) {
			return usageErrorf("--hide %q: give an absolute path", p)
		}
	}
	if u := pick("step-user", f.stepUser); u != "" {
		if iso.StepUser, err = executor.LookupUser(u); err != nil {
			return usageErrorf("%v", err)
		}
	}
	cfg.Executor.Isolation = iso
	cfg.Executor.WorkRoot = pick("work-dir", f.workDir)
	return nil
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
	undumpable(cfg.Logger)
	err := agent.Run(hard, cfg)
	switch {
	case err == nil:
		return nil
	case kiln.ErrorCode(err) == kiln.CodeInvalid:
		return usageErrorf("%s", kiln.ErrorMessage(err))
	}
	return &exitError{code: ExitFailure, err: fmt.Errorf("agent: %w", err)}
}

// durationText writes a duration in a JSON log as text ("735ms"), not as
// nanoseconds: the server relays a local agent's records into its own log,
// where 7.35e+08 would mean nothing to the reader.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
