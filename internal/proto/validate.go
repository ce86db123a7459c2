package proto

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/kilnci/kiln"
)

// invalidf is a validation failure: the frame is refused with INVALID_MESSAGE.
func invalidf(format string, args ...any) error {
	return &DecodeError{Code: ErrInvalidMessage, Message: fmt.Sprintf(format, args...)}
}

// checkID validates an identifier a peer sent: job, run and agent ids.
func checkID(field, v string) error {
	if v == "" {
		return invalidf("%s is missing", field)
	}
	if len(v) > MaxIDLen {
		return invalidf("%s is longer than %d bytes", field, MaxIDLen)
	}
	for _, r := range v {
		ok := r == '-' || r == '_' || r == '.' || r == ':' ||
			('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
		if !ok {
			return invalidf("%s %q may only contain letters, digits and - _ . :", field, v)
		}
	}
	return nil
}

func checkText(field, v string, max int) error {
	if len(v) > max {
		return invalidf("%s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(v) {
		return invalidf("%s is not valid UTF-8", field)
	}
	return nil
}

// CheckAgentSecret checks the form of an agent secret: MinSecretLen to
// MaxSecretLen letters, digits, '-' and '_'.
func CheckAgentSecret(v string) error {
	if v == "" {
		return invalidf("agent_secret is missing (an agent keeps it in its state directory)")
	}
	if len(v) < MinSecretLen || len(v) > MaxSecretLen {
		return invalidf("agent_secret must be %d to %d bytes long", MinSecretLen, MaxSecretLen)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return invalidf("agent_secret may only hold letters, digits, '-' and '_'")
		}
	}
	return nil
}

// checkPlain is checkText for metadata people read in listings and logs
// (an agent's hostname, version, OS and architecture): control and
// formatting characters, which could rewrite a terminal or reorder the
// text around them, are refused (B115).
func checkPlain(field, v string, max int) error {
	if err := checkText(field, v, max); err != nil {
		return err
	}
	for _, r := range v {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return invalidf("%s holds a control or formatting character (%U)", field, r)
		}
	}
	return nil
}

func checkLease(jobID string, epoch int64) error {
	if err := checkID("job_id", jobID); err != nil {
		return err
	}
	if epoch < 1 {
		return invalidf("lease_epoch must be at least 1, got %d", epoch)
	}
	return nil
}

func (m *Auth) Validate() error {
	if m.Token == "" {
		return invalidf("token is missing")
	}
	if err := checkText("token", m.Token, MaxTokenLen); err != nil {
		return err
	}
	if m.ProtocolVersion < 1 {
		return invalidf("protocol_version is missing")
	}
	return checkPlain("agent_version", m.AgentVersion, MaxMetadataLen)
}

func (m *Register) Validate() error {
	if err := checkID("agent_id", m.AgentID); err != nil {
		return err
	}
	if err := CheckAgentSecret(m.AgentSecret); err != nil {
		return err
	}
	if err := kiln.ValidateLabels(m.Labels); err != nil {
		return invalidf("labels: %s", kiln.ErrorMessage(err))
	}
	if m.MaxJobs < 1 || m.MaxJobs > MaxCapacity {
		return invalidf("max_jobs must be between 1 and %d, got %d", MaxCapacity, m.MaxJobs)
	}
	if len(m.InFlight) > MaxInFlight {
		return invalidf("in_flight lists %d jobs (at most %d)", len(m.InFlight), MaxInFlight)
	}
	for _, j := range m.InFlight {
		if err := checkLease(j.JobID, j.LeaseEpoch); err != nil {
			return err
		}
		if err := checkID("run_id", j.RunID); err != nil {
			return err
		}
	}
	for f, v := range map[string]string{"hostname": m.Hostname, "os": m.OS, "arch": m.Arch, "version": m.Version} {
		if err := checkPlain(f, v, MaxMetadataLen); err != nil {
			return err
		}
	}
	return nil
}

func (m *Heartbeat) Validate() error {
	if m.ActiveJobs < 0 || m.ActiveJobs > MaxCapacity {
		return invalidf("active_jobs %d is out of range", m.ActiveJobs)
	}
	return nil
}

func (m *AgentStatus) Validate() error {
	if m.ActiveJobs < 0 || m.ActiveJobs > MaxCapacity {
		return invalidf("active_jobs %d is out of range", m.ActiveJobs)
	}
	return nil
}

func (m *JobAck) Validate() error { return checkLease(m.JobID, m.LeaseEpoch) }

func (m *JobReject) Validate() error {
	if err := checkLease(m.JobID, m.LeaseEpoch); err != nil {
		return err
	}
	switch m.Reason {
	case RejectBusy, RejectDraining, RejectInvalid:
	default:
		return invalidf("reason %q is not busy, draining or invalid", m.Reason)
	}
	return checkText("message", m.Message, MaxErrorLen)
}

func (m *JobStatus) Validate() error {
	if err := checkLease(m.JobID, m.LeaseEpoch); err != nil {
		return err
	}
	switch m.Status {
	case kiln.JobRunning, kiln.JobSuccess, kiln.JobFailed, kiln.JobCancelled:
	default:
		return invalidf("status %q is not running, success, failed or cancelled", m.Status)
	}
	if err := checkText("error", m.Error, MaxErrorLen); err != nil {
		return err
	}
	if len(m.Outputs) > MaxOutputs {
		return invalidf("%d outputs (at most %d)", len(m.Outputs), MaxOutputs)
	}
	total := 0
	for k, v := range m.Outputs {
		if k == "" || len(k) > MaxNameLen || !utf8.ValidString(k) {
			return invalidf("output name %.40q is empty, too long or not UTF-8", k)
		}
		total += len(k) + len(v)
	}
	if total > MaxOutputBytes {
		return invalidf("outputs total %d bytes (at most %d)", total, MaxOutputBytes)
	}
	return nil
}

func (m *StepStatus) Validate() error {
	if err := checkLease(m.JobID, m.LeaseEpoch); err != nil {
		return err
	}
	if m.Index < -1 || m.Index >= MaxSteps {
		return invalidf("step index %d is out of range", m.Index)
	}
	if !m.Status.Valid() {
		return invalidf("step status %q is not valid", m.Status)
	}
	if m.Attempt < 0 || m.Attempt > 1000 {
		return invalidf("attempt %d is out of range", m.Attempt)
	}
	if err := checkText("name", m.Name, MaxNameLen); err != nil {
		return err
	}
	return checkText("error", m.Error, MaxErrorLen)
}

func (m *Log) Validate() error {
	if err := checkLease(m.JobID, m.LeaseEpoch); err != nil {
		return err
	}
	if m.Step < -1 || m.Step >= MaxSteps {
		return invalidf("step %d is out of range", m.Step)
	}
	if len(m.Lines) == 0 || len(m.Lines) > MaxLinesPerFrame {
		return invalidf("a log frame carries 1 to %d lines, not %d", MaxLinesPerFrame, len(m.Lines))
	}
	var prev uint64
	for i := range m.Lines {
		l := &m.Lines[i]
		if l.Seq <= prev {
			return invalidf("log line seq %d does not follow %d", l.Seq, prev)
		}
		prev = l.Seq
		switch l.Stream {
		case StreamStdout, StreamStderr, StreamSystem:
		default:
			return invalidf("log stream %q is not stdout, stderr or system", l.Stream)
		}
		if len(l.Text) > MaxLineBytes {
			return invalidf("a log line is longer than %d bytes", MaxLineBytes)
		}
	}
	return nil
}

func (m *JobHeartbeat) Validate() error { return checkLease(m.JobID, m.LeaseEpoch) }

func (m *AuthOK) Validate() error { return checkText("connection_id", m.ConnectionID, MaxIDLen) }

func (m *RegisterAck) Validate() error {
	if err := checkID("agent_id", m.AgentID); err != nil {
		return err
	}
	if m.HeartbeatIntervalMS < 0 || m.JobHeartbeatIntervalMS < 0 {
		return invalidf("heartbeat intervals must not be negative")
	}
	return checkCoordinators(m.Coordinators)
}

func (m *Coordinators) Validate() error { return checkCoordinators(m.Coordinators) }

// checkCoordinators bounds a list of coordinator URLs: the agent keeps it.
func checkCoordinators(urls []string) error {
	if len(urls) > MaxCoordinators {
		return invalidf("%d coordinators (at most %d)", len(urls), MaxCoordinators)
	}
	for _, u := range urls {
		if len(u) > 2048 {
			return invalidf("a coordinator URL of %d bytes (at most 2048)", len(u))
		}
	}
	return nil
}

func (m *Dispatch) Validate() error {
	if err := checkLease(m.JobID, m.LeaseEpoch); err != nil {
		return err
	}
	if err := checkID("run_id", m.RunID); err != nil {
		return err
	}
	if len(m.Spec.Steps) > MaxSteps {
		return invalidf("%d steps (at most %d)", len(m.Spec.Steps), MaxSteps)
	}
	if m.Spec.TimeoutMS < 0 {
		return invalidf("timeout_ms must not be negative")
	}
	for i, s := range m.Spec.Steps {
		if s.TimeoutMS < 0 {
			return invalidf("step %d: timeout_ms must not be negative", i)
		}
		if s.Retry != nil && (s.Retry.MaxAttempts < 1 || s.Retry.DelayMS < 0 || s.Retry.MaxDelayMS < 0) {
			return invalidf("step %d: retry needs max_attempts ≥ 1 and non-negative delays", i)
		}
	}
	return nil
}

func (m *Cancel) Validate() error {
	if err := checkID("job_id", m.JobID); err != nil {
		return err
	}
	return checkText("reason", m.Reason, MaxErrorLen)
}

func (m *Ack) Validate() error {
	if m.Seq == 0 {
		return invalidf("ack seq is missing")
	}
	return nil
}

func (*Drain) Validate() error { return nil }

func (m *Error) Validate() error {
	if m.Code == "" {
		return invalidf("error code is missing")
	}
	if err := checkText("code", m.Code, MaxIDLen); err != nil {
		return err
	}
	return checkText("message", m.Message, MaxErrorLen)
}
