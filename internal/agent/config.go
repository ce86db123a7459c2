package agent

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/proto"
)

// Defaults for Config. The heartbeat intervals are only used until the
// orchestrator's register.ack names its own.
const (
	DefaultMaxJobs              = 1
	DefaultBufferFrames         = 10_000
	DefaultHeartbeatInterval    = proto.DefaultHeartbeatInterval
	DefaultJobHeartbeatInterval = proto.DefaultJobHeartbeatInterval
	DefaultMinReconnectDelay    = time.Second
	DefaultMaxReconnectDelay    = proto.DefaultMaxReconnectDelay
	DefaultHandshakeTimeout     = 30 * time.Second
	DefaultStopTimeout          = 10 * time.Second
	DefaultWriteTimeout         = 30 * time.Second
	DefaultVersion              = "dev"
)

// Log frames are coalesced up to these limits: a frame never exceeds the
// protocol's lines per frame, and its raw text stays under an eighth of the
// frame size limit so that even text JSON escapes six-fold still fits.
const (
	maxFrameTextBytes = proto.MaxFrameBytes / 8
	lineOverheadBytes = 64 // seq, stream, time and JSON punctuation of one line
)

// Config is an agent's configuration. Server and Token are required, and one
// of ID or StateDir.
type Config struct {
	// Server is the orchestrator: ws://host:port/ws, wss://…, or
	// http(s)://host:port, to which /ws is appended.
	Server string
	// Token is the agent token (kat_…) sent in the auth frame. It is read
	// once and never passed to a step.
	Token string
	// TokenFile, when Token is empty, holds the token on its first line;
	// it must be private to the agent's user (mode 0600). Steps cannot
	// see it when they are isolated.
	TokenFile string
	// ID is the agent id. Empty: the id kept in StateDir, generated on the
	// first start as <hostname>-<random>.
	ID string
	// Secret proves to the orchestrator that this agent is the one its id
	// was first registered by. Empty: the secret kept in StateDir
	// (agent-secret, 0600), created on the first start; without a
	// StateDir, one for this process only (a restart under the same id
	// is then refused).
	Secret string
	// StateDir keeps the agent's id and secret across restarts (DefaultStateDir),
	// and the work root unless Executor.WorkRoot names one. Steps cannot
	// see it when they are isolated, but for their own job's directory.
	StateDir string
	// Labels are the declared labels; the OS and architecture are added.
	Labels []string
	// MaxJobs is how many jobs run at once (DefaultMaxJobs).
	MaxJobs int
	// Hostname and Version are reported in the registration; Hostname
	// defaults to os.Hostname.
	Hostname string
	Version  string

	// BufferFrames bounds the durable frames kept until acknowledged
	// (DefaultBufferFrames); past it the oldest log frames are dropped.
	BufferFrames int
	// MaxFrameLines bounds the lines coalesced into one log frame
	// (proto.MaxLinesPerFrame).
	MaxFrameLines int

	HeartbeatInterval    time.Duration
	JobHeartbeatInterval time.Duration
	MinReconnectDelay    time.Duration
	MaxReconnectDelay    time.Duration
	// HandshakeTimeout bounds dial, auth and register together.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one control frame write (an ack, a heartbeat).
	WriteTimeout time.Duration
	// StopTimeout bounds the hard stop: waiting for force-cancelled jobs to
	// end and for their last frames to be acknowledged.
	StopTimeout time.Duration

	// Runner prepares and runs the jobs; nil runs them with the executor,
	// configured by Executor (its BaseEnv defaults to this process's
	// environment, without the agent's settings; its WorkRoot to "work" in
	// StateDir; its Isolation, off unless set, hides StateDir and
	// TokenFile from steps).
	Runner   Runner
	Executor executor.Config
	// Drain, when closed, drains the agent: running jobs finish, new ones
	// are refused, and Run returns once everything is acknowledged.
	Drain  <-chan struct{}
	Clock  func() time.Time
	Logger *slog.Logger

	// waitHook, when set (by tests), is told every reconnect delay.
	waitHook func(time.Duration)
	// netHook, when set (by tests), wraps each connection the agent dials,
	// under its write corking.
	netHook func(net.Conn) net.Conn
}

func (c Config) withDefaults() Config {
	c.MaxJobs = cmp.Or(c.MaxJobs, DefaultMaxJobs)
	c.BufferFrames = cmp.Or(c.BufferFrames, DefaultBufferFrames)
	c.MaxFrameLines = cmp.Or(c.MaxFrameLines, proto.MaxLinesPerFrame)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.JobHeartbeatInterval = cmp.Or(c.JobHeartbeatInterval, DefaultJobHeartbeatInterval)
	c.MinReconnectDelay = cmp.Or(c.MinReconnectDelay, DefaultMinReconnectDelay)
	c.MaxReconnectDelay = cmp.Or(c.MaxReconnectDelay, DefaultMaxReconnectDelay)
	c.HandshakeTimeout = cmp.Or(c.HandshakeTimeout, DefaultHandshakeTimeout)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.StopTimeout = cmp.Or(c.StopTimeout, DefaultStopTimeout)
	c.Version = cmp.Or(c.Version, DefaultVersion)
	if c.Hostname == "" {
		c.Hostname, _ = os.Hostname()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks a defaulted Config; its errors are sentences for the
// person who started the agent.
func (c Config) validate() error {
	if _, err := ServerURL(c.Server); err != nil {
		return err
	}
	if c.Token == "" {
		return errNoToken
	}
	if len(c.Token) > proto.MaxTokenLen || strings.ContainsAny(c.Token, " \t\r\n") {
		return fmt.Errorf("the agent token must be one word of at most %d bytes", proto.MaxTokenLen)
	}
	if c.Secret != "" {
		if err := proto.CheckAgentSecret(c.Secret); err != nil {
			return errors.New("the agent secret must be 32 to 128 letters, digits, '-' or '_'")
		}
	}
	if c.ID != "" {
		if err := checkAgentID(c.ID); err != nil {
			return err
		}
	} else if c.StateDir == "" {
		return errors.New("either an agent id or a state directory to keep one in is needed")
	}
	if err := kiln.ValidateLabels(c.Labels); err != nil {
		return fmt.Errorf("labels: %s", kiln.ErrorMessage(err))
	}
	if len(effectiveLabels(c.Labels)) > kiln.MaxLabels {
		return fmt.Errorf("at most %d labels, the OS and architecture included", kiln.MaxLabels)
	}
	if c.MaxJobs < 1 || c.MaxJobs > proto.MaxCapacity {
		return fmt.Errorf("max jobs must be between 1 and %d, not %d", proto.MaxCapacity, c.MaxJobs)
	}
	if c.BufferFrames < 2 {
		return fmt.Errorf("the buffer must hold at least 2 frames, not %d", c.BufferFrames)
	}
	if c.MaxFrameLines < 1 || c.MaxFrameLines > proto.MaxLinesPerFrame {
		return fmt.Errorf("lines per log frame must be between 1 and %d", proto.MaxLinesPerFrame)
	}
	for name, d := range map[string]time.Duration{
		"heartbeat interval": c.HeartbeatInterval, "job heartbeat interval": c.JobHeartbeatInterval,
		"minimum reconnect delay": c.MinReconnectDelay, "maximum reconnect delay": c.MaxReconnectDelay,
		"handshake timeout": c.HandshakeTimeout, "write timeout": c.WriteTimeout, "stop timeout": c.StopTimeout,
	} {
		if d < 0 {
			return fmt.Errorf("the %s must not be negative", name)
		}
	}
	if c.MaxReconnectDelay < c.MinReconnectDelay {
		return errors.New("the maximum reconnect delay is shorter than the minimum")
	}
	return nil
}

// effectiveLabels are the declared labels plus the OS and architecture, in
// canonical form.
func effectiveLabels(declared []string) kiln.Labels {
	return kiln.NewLabels(declared...).Union(runtime.GOOS, runtime.GOARCH)
}

// ServerURL turns the --server value into the WebSocket URL to dial:
// ws:// and wss:// URLs are used as given (with /ws as the path when they
// have none); http:// and https:// become ws:// and wss:// with /ws appended
// to their path.
func ServerURL(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("the orchestrator URL is missing (--server or KILN_AGENT_SERVER)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("the orchestrator URL %q does not parse", raw)
	}
	appendPath := false
	switch strings.ToLower(u.Scheme) {
	case "ws", "wss":
		u.Scheme = strings.ToLower(u.Scheme)
	case "http":
		u.Scheme, appendPath = "ws", true
	case "https":
		u.Scheme, appendPath = "wss", true
	default:
		return "", fmt.Errorf("the orchestrator URL %q must start with ws://, wss://, http:// or https://", raw)
	}
	switch {
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("the orchestrator URL %q has no host", raw)
	case u.User != nil:
		return "", fmt.Errorf("the orchestrator URL %q must not carry credentials; pass the token with --token", raw)
	case u.Fragment != "" || u.RawQuery != "" || u.Opaque != "":
		return "", fmt.Errorf("the orchestrator URL %q must not have a query or fragment", raw)
	}
	path := strings.TrimRight(u.Path, "/")
	if appendPath || path == "" {
		path += proto.Path
	}
	u.Path, u.RawPath = path, ""
	return u.String(), nil
}

// DefaultStateDir is where an agent keeps its id when no --state-dir is
// given: $XDG_STATE_HOME/kiln-agent, else ~/.local/state/kiln-agent.
func DefaultStateDir(getenv func(string) string) (string, error) {
	if d := getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "kiln-agent"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("neither XDG_STATE_HOME nor HOME is set; pass --state-dir")
	}
	return filepath.Join(home, ".local", "state", "kiln-agent"), nil
}

// checkAgentID applies the protocol's rules for ids.
func checkAgentID(id string) error {
	if len(id) > proto.MaxIDLen {
		return fmt.Errorf("the agent id is longer than %d bytes", proto.MaxIDLen)
	}
	for _, r := range id {
		if !idRune(r) {
			return fmt.Errorf(`the agent id %q may only contain letters, digits and "-_.:"`, id)
		}
	}
	if id == "" {
		return errors.New("the agent id is empty")
	}
	return nil
}

func idRune(r rune) bool {
	return r == '-' || r == '_' || r == '.' || r == ':' ||
		('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
}
