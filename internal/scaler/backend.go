package scaler

import (
	"context"
	"strings"
	"sync"
)

// Event types a scaler reports about an agent it starts (B178).
const (
	EventProvisioning = "scaler.provisioning"
	EventNetwork      = "scaler.network"
	EventReady        = "scaler.ready"
	EventFailed       = "scaler.failed"
	EventConnecting   = "agent.connecting"
)

// EventTypes are every scaler event type, the only ones a timeline takes.
var EventTypes = []string{EventProvisioning, EventNetwork, EventReady, EventFailed, EventConnecting}

// ValidEventType reports whether t is one of EventTypes.
func ValidEventType(t string) bool { return contains(EventTypes, t) }

// Backend starts and removes agents: a process, a container, a VM. The
// manager decides when; a backend only does. Every backend passes the
// conformance suite in scalertest.
type Backend interface {
	// Spawn starts an agent that dials req.ServerURL with req.Token, its
	// id req.AgentID and its labels req.Labels, taking one job. It returns
	// once the agent is started (not registered), reporting what it does
	// through req.Event. A failed spawn leaves nothing behind.
	Spawn(ctx context.Context, req SpawnRequest) (Instance, error)
}

// Reaper is a backend that can find and remove, by agent id, an agent a
// previous server process started (containers labelled with it).
type Reaper interface {
	Reap(ctx context.Context, agentID string) error
}

// Sweeper is a backend that can find what a previous process of this
// server left without a spawn row (a crash between start and record) and
// remove it; keep says which agent ids are still known.
type Sweeper interface {
	Sweep(ctx context.Context, keep func(agentID string) bool) error
}

// SpawnRequest is one agent to start.
type SpawnRequest struct {
	AgentID   string
	Labels    []string
	ServerURL string
	Token     string
	// Limits are what the agent may use (0: unlimited).
	CPUs        float64
	MemoryBytes int64
	Env         map[string]string
	// Binary is the kiln executable a process scaler names ("": the
	// backend's default).
	Binary string
	// Event reports progress (EventProvisioning, EventReady, …).
	Event func(eventType, detail string)
	// Scaler is the scaler's configuration (its type's keys); JobID and
	// RunID the job it is started for ("": a warm-pool agent).
	Scaler       Config
	JobID, RunID string
}

// Instance is a started agent.
type Instance interface {
	// Exited is closed when the agent ended by itself.
	Exited() <-chan struct{}
	// ExitErr says how it ended, once Exited is closed.
	ExitErr() error
	// Tail is the last lines of its output (B177), "" when none.
	Tail() string
	// Destroy stops and removes it, gracefully first; reason says why
	// (job-complete, spawn-timeout, shutdown, …). It is idempotent.
	Destroy(ctx context.Context, reason string) error
}

// TailLines is how many output lines a capture keeps.
const TailLines = 50

// Capture keeps the last TailLines lines written to it (B177): a ring of
// lines, joined oldest first by Tail.
type Capture struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
}

// Write takes output; complete lines enter the ring.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial = append(c.partial, p...)
	for {
		i := strings.IndexByte(string(c.partial), '\n')
		if i < 0 {
			break
		}
		c.push(string(c.partial[:i]))
		c.partial = c.partial[i+1:]
	}
	if len(c.partial) > 64<<10 { // a line without end is cut into pieces
		c.push(string(c.partial))
		c.partial = nil
	}
	return len(p), nil
}

func (c *Capture) push(line string) {
	line = strings.TrimRight(line, "\r")
	c.lines = append(c.lines, line)
	if len(c.lines) > TailLines {
		c.lines = c.lines[len(c.lines)-TailLines:]
	}
}

// Tail returns the kept lines (and an unfinished last one) joined with
// "\n", oldest first; "" when nothing was written.
func (c *Capture) Tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines := c.lines
	if len(c.partial) > 0 {
		lines = append(append([]string(nil), lines...), string(c.partial))
		if len(lines) > TailLines {
			lines = lines[len(lines)-TailLines:]
		}
	}
	return strings.Join(lines, "\n")
}

// WithTail enriches a failure with the captured output (B177): the bare
// message when nothing was captured.
func WithTail(msg, tail string) string {
	if tail == "" {
		return msg
	}
	return msg + "\n--- captured output (last 50 lines) ---\n" + tail
}
