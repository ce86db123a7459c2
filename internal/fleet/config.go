package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
)

// Defaults for Config beyond the protocol's own (proto.Default*).
const (
	DefaultSweepInterval   = time.Second
	DefaultRedriveInterval = 10 * time.Second
	DefaultWriteTimeout    = 10 * time.Second
	// Rate limits are per connection. They are generous: one agent
	// streaming 200,000 log lines a second sends about 40 MB/s in a few
	// thousand frames. They exist to stop a runaway agent from starving the
	// others, not to shape normal traffic.
	DefaultMessagesPerSecond = 2000
	DefaultMessageBurst      = 4000
	DefaultBytesPerSecond    = 64 << 20
	DefaultByteBurst         = 64 << 20
	DefaultRateLimitGrace    = 5 * time.Second
	DefaultMaxBatch          = 256
)

// Config configures a Fleet. Every field has a default; zero means "use
// it".
//
// The ack deadline, the recovery window and the stale-job threshold are not
// here: the store arms and sweeps them in the statements that claim, lose
// and heartbeat jobs, so they are store.Config's AckTimeout, RecoveryWindow
// and StaleAfter. Keep StaleAfter above JobHeartbeatInterval (the default is
// twice it) and RecoveryWindow above the agents' maximum reconnect delay.
type Config struct {
	// AuthTimeout bounds the wait for the auth frame after the upgrade
	// (close 4002).
	AuthTimeout time.Duration
	// RegisterTimeout bounds the wait for register after auth.ok (close
	// 4002).
	RegisterTimeout time.Duration
	// HeartbeatInterval and JobHeartbeatInterval are told to agents in
	// register.ack.
	HeartbeatInterval    time.Duration
	JobHeartbeatInterval time.Duration
	// An agent silent (no frame at all) for UnhealthyAfter is marked
	// unhealthy and gets no new jobs; silent for DropAfter it is dropped
	// (close 4004).
	UnhealthyAfter time.Duration
	DropAfter      time.Duration
	// RecoveryWindow is the store's (store.Config.RecoveryWindow), and
	// LeaseMargin what the agents subtract from their lease: register.ack
	// sends all three, and each agent stops its jobs once it has not heard
	// from a coordinator for proto.AgentLease of them (B126).
	RecoveryWindow time.Duration
	LeaseMargin    time.Duration
	// SweepInterval is how often the monitor runs: heartbeat checks, the
	// ack, recovery and stale sweeps, buffered job heartbeats. It bounds
	// how late a deadline is noticed.
	SweepInterval time.Duration
	// RedriveInterval is the safety net: every queued job is offered to
	// idle agents again, so a missed wake-up never strands a job.
	RedriveInterval time.Duration
	// WriteTimeout bounds one frame written to an agent; an agent that
	// cannot take a frame for that long is disconnected.
	WriteTimeout time.Duration
	// MaxMessageBytes is the largest frame read once a connection has
	// authenticated (larger: close 1009); before, it is
	// MaxUnauthenticatedFrameBytes.
	MaxMessageBytes int64
	// MaxUnauthenticated and MaxUnauthenticatedPerAddress bound the
	// connections that have not authenticated yet, in all and per remote
	// address; the upgrade of one more is refused with 503.
	MaxUnauthenticated           int
	MaxUnauthenticatedPerAddress int
	// Per-connection token buckets. Agent heartbeats and job heartbeats are
	// exempt. A connection over a limit is slowed down (its frames are read
	// later); one over it for longer than RateLimitGrace gets error
	// RATE_LIMITED and close 4008.
	MessagesPerSecond float64
	MessageBurst      int
	BytesPerSecond    float64
	ByteBurst         int
	RateLimitGrace    time.Duration
	// MaxBatch bounds the store operations committed in one transaction.
	MaxBatch int
	// Cluster is the coordinators sharing the database (cluster.Cluster):
	// who leads, which are alive, and the cross-server wake-up. nil: this
	// fleet is the only coordinator (tests, kiln run).
	Cluster Cluster

	// Clock returns the current time (default time.Now). Deadlines the
	// fleet keeps (heartbeats, rate limits, token expiry) read it; timers
	// for the auth and register deadlines are real.
	Clock  func() time.Time
	Logger *slog.Logger

	// Settle, when set, is the upload settle: a job's success waits in it
	// for the uploads the job started before it is stored (and its
	// dependents released). It returns at once when none is in flight.
	Settle Settle

	// Scaler, when set, starts agents for jobs no idle agent takes
	// (internal/scaler) and is told of its agents' lives.
	Scaler Scaler

	// OnRegister, when set, is called with an agent's id once its
	// registration is committed and acknowledged (the server's start-up
	// waits for its local agents with it). It must not block.
	OnRegister func(agentID string)
}

// Settle is the upload settle as the fleet uses it (caches.Settle).
type Settle interface {
	// Enabled: successes wait for their jobs' uploads (a zero timeout
	// disables the settle).
	Enabled() bool
	Wait(ctx context.Context, jobID string) time.Duration
}

// Scaler is the scaler manager as the fleet uses it.
type Scaler interface {
	// Wake: jobs are left without an idle agent.
	Wake()
	// Reason says why jobs with the requirement wait when a scaler serves
	// it; "" with true keeps the reason the jobs have (a provisioning
	// error).
	Reason(r kiln.Requirement) (string, bool)
	// Registered: an agent registered. It returns the job a scaler started
	// it for, whether it is a scaler's agent, which takes one job, and
	// what it was given: it takes only jobs within that.
	Registered(agentID string) (jobID string, ephemeral bool, limit kiln.Resources)
	// Took: a scaler's agent was sent a job.
	Took(agentID, runID, jobID string)
	// Gone: an agent's connection ended holding held started jobs.
	Gone(agentID, reason string, held int)
}

func (c Config) withDefaults() Config {
	c.AuthTimeout = cmp.Or(c.AuthTimeout, proto.DefaultAuthTimeout)
	c.RegisterTimeout = cmp.Or(c.RegisterTimeout, proto.DefaultRegisterTimeout)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, proto.DefaultHeartbeatInterval)
	c.JobHeartbeatInterval = cmp.Or(c.JobHeartbeatInterval, proto.DefaultJobHeartbeatInterval)
	c.UnhealthyAfter = cmp.Or(c.UnhealthyAfter, proto.DefaultUnhealthyAfter)
	c.DropAfter = cmp.Or(c.DropAfter, proto.DefaultDropAfter)
	c.RecoveryWindow = cmp.Or(c.RecoveryWindow, proto.DefaultRecoveryWindow)
	c.LeaseMargin = cmp.Or(c.LeaseMargin, proto.DefaultLeaseMargin)
	c.SweepInterval = cmp.Or(c.SweepInterval, DefaultSweepInterval)
	c.RedriveInterval = cmp.Or(c.RedriveInterval, DefaultRedriveInterval)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.RateLimitGrace = cmp.Or(c.RateLimitGrace, DefaultRateLimitGrace)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, proto.MaxFrameBytes)
	c.MessagesPerSecond = cmp.Or(c.MessagesPerSecond, DefaultMessagesPerSecond)
	c.MessageBurst = cmp.Or(c.MessageBurst, DefaultMessageBurst)
	c.BytesPerSecond = cmp.Or(c.BytesPerSecond, DefaultBytesPerSecond)
	c.ByteBurst = cmp.Or(c.ByteBurst, DefaultByteBurst)
	c.MaxBatch = cmp.Or(c.MaxBatch, DefaultMaxBatch)
	c.MaxUnauthenticated = cmp.Or(c.MaxUnauthenticated, DefaultMaxUnauthenticated)
	c.MaxUnauthenticatedPerAddress = cmp.Or(c.MaxUnauthenticatedPerAddress, DefaultMaxUnauthenticatedPerAddress)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"AuthTimeout", c.AuthTimeout}, {"RegisterTimeout", c.RegisterTimeout},
		{"HeartbeatInterval", c.HeartbeatInterval}, {"JobHeartbeatInterval", c.JobHeartbeatInterval},
		{"UnhealthyAfter", c.UnhealthyAfter}, {"DropAfter", c.DropAfter},
		{"RecoveryWindow", c.RecoveryWindow}, {"LeaseMargin", c.LeaseMargin},
		{"SweepInterval", c.SweepInterval}, {"RedriveInterval", c.RedriveInterval},
		{"WriteTimeout", c.WriteTimeout}, {"RateLimitGrace", c.RateLimitGrace},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("fleet: %s is negative (%s)", d.name, d.v))
		}
	}
	if c.UnhealthyAfter <= c.HeartbeatInterval {
		errs = append(errs, fmt.Errorf("fleet: UnhealthyAfter (%s) must be longer than HeartbeatInterval (%s), or every agent looks unhealthy between two heartbeats",
			c.UnhealthyAfter, c.HeartbeatInterval))
	}
	if c.DropAfter < c.UnhealthyAfter {
		errs = append(errs, fmt.Errorf("fleet: DropAfter (%s) must not be shorter than UnhealthyAfter (%s)", c.DropAfter, c.UnhealthyAfter))
	}
	if c.MaxMessageBytes < 1024 || c.MaxMessageBytes > proto.MaxFrameBytes {
		errs = append(errs, fmt.Errorf("fleet: MaxMessageBytes is %d; it must be between 1 KiB and the protocol's %d bytes", c.MaxMessageBytes, proto.MaxFrameBytes))
	}
	if c.MessagesPerSecond < 0 || c.MessageBurst < 1 || c.BytesPerSecond < 0 || c.ByteBurst < 1 {
		errs = append(errs, errors.New("fleet: the rate limits must be positive"))
	}
	if int64(c.ByteBurst) < c.MaxMessageBytes {
		errs = append(errs, fmt.Errorf("fleet: ByteBurst (%d) is smaller than MaxMessageBytes (%d): a frame of the largest size could never be read", c.ByteBurst, c.MaxMessageBytes))
	}
	if c.MaxUnauthenticated < 1 || c.MaxUnauthenticatedPerAddress < 1 || c.MaxUnauthenticatedPerAddress > c.MaxUnauthenticated {
		errs = append(errs, fmt.Errorf("fleet: MaxUnauthenticatedPerAddress (%d) must be between 1 and MaxUnauthenticated (%d)",
			c.MaxUnauthenticatedPerAddress, c.MaxUnauthenticated))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, errors.New("fleet: MaxBatch must be at least 1"))
	}
	return errors.Join(errs...)
}
