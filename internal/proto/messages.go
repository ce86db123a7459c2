package proto

import (
	"time"

	"github.com/kilnci/kiln"
)

// Message types. Agent → orchestrator first, then orchestrator → agent.
const (
	TypeAuth         = "auth"
	TypeRegister     = "register"
	TypeHeartbeat    = "heartbeat"
	TypeAgentStatus  = "agent.status"
	TypeJobAck       = "job.ack"
	TypeJobReject    = "job.reject"
	TypeJobStatus    = "job.status"
	TypeStepStatus   = "step.status"
	TypeLog          = "log"
	TypeJobHeartbeat = "job.heartbeat"

	TypeAuthOK      = "auth.ok"
	TypeRegisterAck = "register.ack"
	TypeDispatch    = "job.dispatch"
	TypeCancel      = "job.cancel"
	TypeAck         = "ack"
	TypeDrain       = "agent.drain"
	TypeError       = "error"
	// TypeCoordinators replaces the agent's list of live coordinators
	// after registration (B139); an agent that does not know it ignores
	// it, as it ignores every frame type it cannot read.
	TypeCoordinators = "coordinators"
)

// Message is one decoded, validated frame payload.
type Message interface {
	Type() string
	Validate() error
}

// Durable reports whether frames of this type carry a seq and must be
// acknowledged and replayed: the agent never loses them.
func Durable(typ string) bool {
	return typ == TypeJobStatus || typ == TypeStepStatus || typ == TypeLog
}

// FromAgent reports whether typ is sent by agents.
func FromAgent(typ string) bool {
	switch typ {
	case TypeAuth, TypeRegister, TypeHeartbeat, TypeAgentStatus, TypeJobAck, TypeJobReject,
		TypeJobStatus, TypeStepStatus, TypeLog, TypeJobHeartbeat:
		return true
	}
	return false
}

// Auth is the first frame on a new connection.
type Auth struct {
	Token           string `json:"token"`
	ProtocolVersion int    `json:"protocol_version"`
	AgentVersion    string `json:"agent_version,omitempty"`
}

// InFlight is a job an agent still holds when it (re)registers.
type InFlight struct {
	JobID      string `json:"job_id"`
	RunID      string `json:"run_id"`
	LeaseEpoch int64  `json:"lease_epoch"`
	Started    bool   `json:"started"`
}

// Register announces the agent after auth: who it is, what it offers, and
// which jobs it is still running (after a reconnect). AgentSecret proves
// the agent is the one that first registered AgentID: the orchestrator
// binds the id to it at the first registration and refuses the id to
// anyone without it.
type Register struct {
	AgentID     string     `json:"agent_id"`
	AgentSecret string     `json:"agent_secret"`
	Labels      []string   `json:"labels"`
	MaxJobs     int        `json:"max_jobs"`
	InFlight    []InFlight `json:"in_flight,omitempty"`
	Hostname    string     `json:"hostname,omitempty"`
	OS          string     `json:"os,omitempty"`
	Arch        string     `json:"arch,omitempty"`
	Version     string     `json:"version,omitempty"`
	Draining    bool       `json:"draining,omitempty"`
}

// Heartbeat says the agent is alive; it is never buffered or replayed.
type Heartbeat struct {
	Time       time.Time `json:"time"`
	ActiveJobs int       `json:"active_jobs"`
	Draining   bool      `json:"draining,omitempty"`
}

// AgentStatus reports a change of capacity (a job finished, drain started).
type AgentStatus struct {
	ActiveJobs int  `json:"active_jobs"`
	Draining   bool `json:"draining,omitempty"`
}

// JobAck confirms a job.dispatch arrived and will run.
type JobAck struct {
	JobID      string `json:"job_id"`
	LeaseEpoch int64  `json:"lease_epoch"`
}

// Reject reasons.
const (
	RejectBusy     = "busy"
	RejectDraining = "draining"
	RejectInvalid  = "invalid"
)

// JobReject refuses a job.dispatch; the orchestrator requeues the job.
type JobReject struct {
	JobID      string `json:"job_id"`
	LeaseEpoch int64  `json:"lease_epoch"`
	Reason     string `json:"reason"`
	Message    string `json:"message,omitempty"`
}

// JobStatus reports the job started or finished. Status is running, success,
// failed or cancelled.
type JobStatus struct {
	JobID      string            `json:"job_id"`
	LeaseEpoch int64             `json:"lease_epoch"`
	Status     kiln.JobStatus    `json:"status"`
	Outputs    map[string]string `json:"outputs,omitempty"`
	Error      string            `json:"error,omitempty"`
	Time       time.Time         `json:"time"`
}

// StepStatus reports one step (index -1 is the checkout pseudo-step).
type StepStatus struct {
	JobID      string          `json:"job_id"`
	LeaseEpoch int64           `json:"lease_epoch"`
	Index      int             `json:"index"`
	Name       string          `json:"name"`
	Status     kiln.StepStatus `json:"status"`
	Attempt    int             `json:"attempt,omitempty"`
	ExitCode   *int            `json:"exit_code,omitempty"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// Streams of a log line.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	// StreamSystem marks lines kiln itself wrote into a step's log (a
	// truncation notice, a gap marker after a reconnect).
	StreamSystem = "system"
)

// LogLine is one line of a step's output. Seq is per step, from 1, without
// gaps except where the agent says so with a system line. The time is unix
// milliseconds: log frames are the hottest message, and a number decodes
// several times faster than an RFC 3339 string.
type LogLine struct {
	Seq    uint64 `json:"seq"`
	Stream string `json:"stream"`
	Text   string `json:"text"`
	TimeMS int64  `json:"time_ms"`
}

// Log carries a batch of one step's log lines.
type Log struct {
	JobID      string    `json:"job_id"`
	LeaseEpoch int64     `json:"lease_epoch"`
	Step       int       `json:"step"`
	Lines      []LogLine `json:"lines"`
}

// JobHeartbeat says a job is still running; never buffered or replayed.
type JobHeartbeat struct {
	JobID      string `json:"job_id"`
	LeaseEpoch int64  `json:"lease_epoch"`
}

// AuthOK accepts the token.
type AuthOK struct {
	ConnectionID string `json:"connection_id"`
}

// RegisterAck accepts a registration. Labels are the effective labels
// (declared plus os and arch); Recovered lists in-flight jobs the agent keeps;
// Dropped lists in-flight jobs it must stop (they were given to another agent
// or finished). The timings tell the agent how often to send heartbeats.
type RegisterAck struct {
	AgentID                string   `json:"agent_id"`
	Labels                 []string `json:"labels"`
	Mandatory              []string `json:"mandatory,omitempty"`
	MaxJobs                int      `json:"max_jobs"`
	Recovered              []string `json:"recovered,omitempty"`
	Dropped                []string `json:"dropped,omitempty"`
	HeartbeatIntervalMS    int64    `json:"heartbeat_interval_ms"`
	JobHeartbeatIntervalMS int64    `json:"job_heartbeat_interval_ms"`
	// Coordinators are the advertise URLs of the live coordinators sharing
	// the orchestrator's database, this one first: where the agent may
	// reconnect when this one is gone.
	Coordinators []string `json:"coordinators,omitempty"`
	// The agent's lease (B126): the orchestrator's drop_after, recovery
	// window and lease margin, from which both ends compute the same
	// AgentLease. Zero (an older orchestrator): the defaults.
	DropAfterMS      int64 `json:"drop_after_ms,omitempty"`
	RecoveryWindowMS int64 `json:"recovery_window_ms,omitempty"`
	LeaseMarginMS    int64 `json:"lease_margin_ms,omitempty"`
}

// Lease is how long the agent may keep running jobs without hearing from
// its coordinators (B126): drop_after + recovery_window − margin, the
// defaults' when the ack names none, and never less than a second.
func (m *RegisterAck) Lease() time.Duration {
	drop, window, margin := DefaultDropAfter, DefaultRecoveryWindow, DefaultLeaseMargin
	if m.DropAfterMS > 0 && m.RecoveryWindowMS > 0 {
		drop, window = time.Duration(m.DropAfterMS)*time.Millisecond, time.Duration(m.RecoveryWindowMS)*time.Millisecond
		margin = time.Duration(max(m.LeaseMarginMS, 0)) * time.Millisecond
	}
	return AgentLease(drop, window, margin)
}

// AgentLease is drop_after + recovery_window − margin, at least a second.
func AgentLease(dropAfter, recoveryWindow, margin time.Duration) time.Duration {
	return max(dropAfter+recoveryWindow-margin, time.Second)
}

// Dispatch hands one job to the agent under a lease epoch: every update the
// agent sends about it carries the epoch, and updates with an old epoch are
// refused.
type Dispatch struct {
	JobID      string  `json:"job_id"`
	RunID      string  `json:"run_id"`
	LeaseEpoch int64   `json:"lease_epoch"`
	Attempt    int     `json:"attempt"`
	Spec       JobSpec `json:"spec"`
}

// Cancel stops a job: gracefully (SIGTERM, grace, SIGKILL) or by force.
type Cancel struct {
	JobID      string `json:"job_id"`
	LeaseEpoch int64  `json:"lease_epoch,omitempty"`
	Force      bool   `json:"force,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Ack says every durable frame up to and including Seq is stored.
type Ack struct {
	Seq uint64 `json:"seq"`
}

// Drain asks the agent to finish its jobs and take no new ones.
type Drain struct{}

// Coordinators is the list of live coordinators register.ack carried,
// sent again whenever the set changes while the agent is connected (a
// server joins or dies): the agent replaces its failover list with it, so
// an agent registered before another server started can still move there.
type Coordinators struct {
	Coordinators []string `json:"coordinators"`
}

// Error reports a problem with a code; the connection may close after it.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (*Auth) Type() string         { return TypeAuth }
func (*Register) Type() string     { return TypeRegister }
func (*Heartbeat) Type() string    { return TypeHeartbeat }
func (*AgentStatus) Type() string  { return TypeAgentStatus }
func (*JobAck) Type() string       { return TypeJobAck }
func (*JobReject) Type() string    { return TypeJobReject }
func (*JobStatus) Type() string    { return TypeJobStatus }
func (*StepStatus) Type() string   { return TypeStepStatus }
func (*Log) Type() string          { return TypeLog }
func (*JobHeartbeat) Type() string { return TypeJobHeartbeat }
func (*AuthOK) Type() string       { return TypeAuthOK }
func (*RegisterAck) Type() string  { return TypeRegisterAck }
func (*Dispatch) Type() string     { return TypeDispatch }
func (*Cancel) Type() string       { return TypeCancel }
func (*Ack) Type() string          { return TypeAck }
func (*Drain) Type() string        { return TypeDrain }
func (*Error) Type() string        { return TypeError }
func (*Coordinators) Type() string { return TypeCoordinators }

// newMessage returns an empty message of the given type, or nil.
func newMessage(typ string) Message {
	switch typ {
	case TypeAuth:
		return &Auth{}
	case TypeRegister:
		return &Register{}
	case TypeHeartbeat:
		return &Heartbeat{}
	case TypeAgentStatus:
		return &AgentStatus{}
	case TypeJobAck:
		return &JobAck{}
	case TypeJobReject:
		return &JobReject{}
	case TypeJobStatus:
		return &JobStatus{}
	case TypeStepStatus:
		return &StepStatus{}
	case TypeLog:
		return &Log{}
	case TypeJobHeartbeat:
		return &JobHeartbeat{}
	case TypeAuthOK:
		return &AuthOK{}
	case TypeRegisterAck:
		return &RegisterAck{}
	case TypeDispatch:
		return &Dispatch{}
	case TypeCancel:
		return &Cancel{}
	case TypeAck:
		return &Ack{}
	case TypeDrain:
		return &Drain{}
	case TypeError:
		return &Error{}
	case TypeCoordinators:
		return &Coordinators{}
	}
	return nil
}
