package proto

import "time"

// Version is the protocol version this build speaks; MinVersion the oldest it
// accepts from a peer.
const (
	Version    = 1
	MinVersion = 1
)

// Path is the orchestrator's WebSocket endpoint for agents.
const Path = "/ws"

// WebSocket close codes. 4xxx codes are private to kiln; an agent retries
// after every code except CloseAuthFailed, CloseTokenRevoked and
// CloseProtocol, which need an operator to act, and CloseSuperseded, which
// means a newer connection of the same agent lives on.
const (
	CloseNormal          = 1000
	CloseGoingAway       = 1001 // server shutting down: reconnect
	CloseTooBig          = 1009 // a frame over the size limit
	CloseUnauthorized    = 4001 // no auth frame or a bad token
	CloseAuthTimeout     = 4002 // no auth (or no register) within the deadline
	CloseInvalidMessage  = 4003 // a frame that does not parse or validate; also AGENT_ID_IN_USE (retryable)
	CloseHeartbeat       = 4004 // no heartbeat within the drop window
	CloseProtocol        = 4005 // unsupported protocol version
	CloseInternal        = 4006 // the orchestrator failed; reconnect
	CloseRateLimited     = 4008 // sustained over the message or byte rate limit
	CloseSuperseded      = 4009 // the same agent id connected again; this socket is stale
	CloseAuthFailed      = 4010 // the token is unknown, revoked, expired, consumed or out of scope
	CloseDispatchAckLate = 4031 // a job.dispatch was not acknowledged in time
	CloseTokenRevoked    = 4011 // the token was revoked while connected
)

// Error codes carried by "error" frames.
const (
	ErrInvalidMessage = "INVALID_MESSAGE"
	ErrAgentIDInUse   = "AGENT_ID_IN_USE"
	// ErrAgentIDBound: the id belongs to another agent (its secret does
	// not match); closed with CloseAuthFailed, not retried.
	ErrAgentIDBound  = "AGENT_ID_BOUND"
	ErrUnauthorized  = "UNAUTHORIZED"
	ErrProtocol      = "PROTOCOL_VERSION"
	ErrRateLimited   = "RATE_LIMITED"
	ErrTooLarge      = "MESSAGE_TOO_LARGE"
	ErrStaleLease    = "STALE_LEASE" // an update for a job the agent no longer holds
	ErrNotRegistered = "NOT_REGISTERED"
	ErrInternal      = "INTERNAL"
)

// Default timings of the protocol's two ends (docs/protocol.md explains
// each; the heartbeat limits are B47's). Every one is configurable on the side that enforces it; the ack
// timeout and the recovery window are the store's (store.DefaultAckTimeout,
// store.DefaultRecoveryWindow), which decides on them.
const (
	DefaultAuthTimeout          = 5 * time.Second
	DefaultRegisterTimeout      = 10 * time.Second
	DefaultHeartbeatInterval    = 30 * time.Second
	DefaultUnhealthyAfter       = 90 * time.Second
	DefaultDropAfter            = 180 * time.Second
	DefaultJobHeartbeatInterval = 60 * time.Second
	DefaultMaxReconnectDelay    = 60 * time.Second
	// DefaultRecoveryWindow mirrors store.DefaultRecoveryWindow for the
	// agent, which computes its lease from it when an older orchestrator
	// does not send one; DefaultLeaseMargin is subtracted from the lease
	// so the agent stops a job before the orchestrator gives it away.
	DefaultRecoveryWindow = 120 * time.Second
	DefaultLeaseMargin    = 30 * time.Second
)

// Size limits. A frame over MaxFrameBytes closes the connection with
// CloseTooBig; the smaller limits bound what one frame may carry.
const (
	MaxFrameBytes    = 4 << 20
	MaxIDLen         = 128
	MaxLinesPerFrame = 5000
	MaxLineBytes     = 64 << 10
	MaxErrorLen      = 4096
	MaxOutputs       = 256
	MaxOutputBytes   = 1 << 20
	MaxInFlight      = 1024
	MaxSteps         = 1000
	MaxCapacity      = 1024
	MaxNameLen       = 512
	MaxTokenLen      = 512
	MaxMetadataLen   = 256
	MinSecretLen     = 32
	MaxSecretLen     = 128
	// MaxCoordinators bounds the coordinator URLs of register.ack and
	// coordinators frames.
	MaxCoordinators = 64
)
