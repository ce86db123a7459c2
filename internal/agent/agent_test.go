package agent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent/agenttest"
	"github.com/kilnci/kiln/internal/proto"
)

// The agent keeps its id and its secret (B113) in the state directory and
// registers with both, the same after a restart.
// Proves B43 and B113 (docs/behaviours.md).
func TestRegisterSendsIdentityLabelsAndKeepsTheID(t *testing.T) {
	orch := agenttest.New(t)
	stateDir := t.TempDir()
	h := startAgent(t, orch, func(c *Config) { c.StateDir = stateDir })
	c := orch.Accept(t)
	auth, reg := c.Handshake(t, proto.RegisterAck{})
	if auth.Token != "kat_test" || auth.ProtocolVersion != proto.Version || auth.AgentVersion != "1.2.3" {
		t.Errorf("auth %+v", auth)
	}
	wantLabels := kiln.NewLabels("docker", "big", runtime.GOOS, runtime.GOARCH)
	if !slices.Equal(reg.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", reg.Labels, wantLabels)
	}
	if reg.MaxJobs != 2 || reg.Hostname != "build-host" || reg.OS != runtime.GOOS || reg.Arch != runtime.GOARCH ||
		reg.Version != "1.2.3" || len(reg.InFlight) != 0 || reg.Draining {
		t.Errorf("register %+v", reg)
	}
	if !strings.HasPrefix(reg.AgentID, "build-host-") {
		t.Errorf("agent id %q", reg.AgentID)
	}
	stored, err := os.ReadFile(filepath.Join(stateDir, idFile))
	if err != nil || strings.TrimSpace(string(stored)) != reg.AgentID {
		t.Fatalf("state file %q (%v), id %q", stored, err, reg.AgentID)
	}
	// B113: the secret the id is bound to, kept private beside it.
	secret, err := os.ReadFile(filepath.Join(stateDir, secretFile))
	if err != nil || strings.TrimSpace(string(secret)) != reg.AgentSecret || !strings.HasPrefix(reg.AgentSecret, secretPrefix) {
		t.Fatalf("secret file %q (%v), sent %q", secret, err, reg.AgentSecret)
	}
	if info, err := os.Stat(filepath.Join(stateDir, secretFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode %v (%v)", info.Mode(), err)
	}
	h.stop()
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}

	// A restart with the same state directory is the same agent.
	startAgent(t, orch, func(c *Config) { c.StateDir = stateDir })
	_, again := orch.Accept(t).Handshake(t, proto.RegisterAck{})
	if again.AgentID != reg.AgentID || again.AgentSecret != reg.AgentSecret {
		t.Fatalf("restarted as %q (secret %q), was %q (%q)", again.AgentID, again.AgentSecret, reg.AgentID, reg.AgentSecret)
	}
	// --id wins over the state directory.
	startAgent(t, orch, func(c *Config) { c.StateDir = stateDir; c.ID = "ci-7" })
	if _, named := orch.Accept(t).Handshake(t, proto.RegisterAck{}); named.AgentID != "ci-7" {
		t.Fatalf("registered as %q", named.AgentID)
	}
}

// Proves B46 (docs/behaviours.md).
func TestHeartbeatsAtTheIntervalsOfTheRegisterAck(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c, _ := h.connect(t, proto.RegisterAck{HeartbeatIntervalMS: 5, JobHeartbeatIntervalMS: 5})
	for range 3 {
		if hb, ok := c.Heartbeat(t).(*proto.Heartbeat); ok && (hb.ActiveJobs != 0 || hb.Time.IsZero()) {
			t.Fatalf("heartbeat %+v", hb)
		}
	}
	c.Send(t, dispatch("job-1", 3, "block"))
	expectAck(t, c)
	x := h.exec(t)
	for {
		switch m := c.Heartbeat(t).(type) {
		case *proto.JobHeartbeat:
			if m.JobID != "job-1" || m.LeaseEpoch != 3 {
				t.Fatalf("job heartbeat %+v", m)
			}
			x.Release()
			return
		case *proto.Heartbeat:
			if m.ActiveJobs > 1 {
				t.Fatalf("heartbeat %+v", m)
			}
		}
	}
}

// durable collects frames up to the job's final status, leaving out
// agent.status frames (sent directly, so their position is not fixed).
func durable(t *testing.T, c *agenttest.Conn, jobID string) []agenttest.Frame {
	t.Helper()
	var out []agenttest.Frame
	for {
		f := c.Next(t)
		if f.Type() == proto.TypeAgentStatus {
			continue
		}
		out = append(out, f)
		if st, ok := f.Msg.(*proto.JobStatus); ok && st.JobID == jobID && st.Status.Terminal() {
			return out
		}
	}
}

func TestDispatchRunsTheJobAndReportsEverything(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, func(c *Config) { c.MaxJobs = 1 })
	c, _ := h.connect(t, proto.RegisterAck{})
	c.Send(t, dispatch("job-1", 7, "lines 120", "output version=42"))
	ack := expectAck(t, c)
	if ack.JobID != "job-1" || ack.LeaseEpoch != 7 {
		t.Fatalf("ack %+v", ack)
	}
	frames := durable(t, c, "job-1")
	var kinds []string
	var lineSeqs []uint64
	for i, f := range frames {
		if f.Seq != uint64(i+1) {
			t.Fatalf("frame %d has seq %d", i, f.Seq)
		}
		switch m := f.Msg.(type) {
		case *proto.JobStatus:
			kinds = append(kinds, "job:"+string(m.Status))
			if m.LeaseEpoch != 7 {
				t.Errorf("job status epoch %d", m.LeaseEpoch)
			}
		case *proto.StepStatus:
			kinds = append(kinds, "step"+string(rune('0'+m.Index))+":"+string(m.Status))
			if m.LeaseEpoch != 7 || m.JobID != "job-1" {
				t.Errorf("step status %+v", m)
			}
		case *proto.Log:
			if m.Step != 0 || m.LeaseEpoch != 7 {
				t.Errorf("log frame %+v", m)
			}
			if len(kinds) == 0 || kinds[len(kinds)-1] != "log" {
				kinds = append(kinds, "log")
			}
			for _, l := range m.Lines {
				lineSeqs = append(lineSeqs, l.Seq)
			}
		}
	}
	want := "job:running step0:running log step0:success step1:running step1:success job:success"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("frames: %s\nwant:   %s", got, want)
	}
	if len(lineSeqs) != 120 || lineSeqs[0] != 1 || lineSeqs[119] != 120 || !slices.IsSorted(lineSeqs) {
		t.Fatalf("%d lines, first %d", len(lineSeqs), lineSeqs[0])
	}
	final := frames[len(frames)-1].Msg.(*proto.JobStatus)
	if final.Outputs["version"] != "42" || final.Time.IsZero() {
		t.Fatalf("final %+v", final)
	}
	// A finished job frees its slot.
	c.Send(t, dispatch("job-2", 1, "output a=b"))
	expectAck(t, c)
}

// Proves B46 (docs/behaviours.md).
func TestAgentStatusFollowsCapacity(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c, _ := h.connect(t, proto.RegisterAck{})
	c.SetAutoAck(true)
	c.Send(t, dispatch("job-1", 1, "block"))
	x := h.exec(t)
	var seen []int
	for f := c.Next(t); ; f = c.Next(t) {
		if st, ok := f.Msg.(*proto.AgentStatus); ok {
			seen = append(seen, st.ActiveJobs)
			if len(seen) == 1 {
				x.Release()
			} else {
				break
			}
		}
	}
	if !slices.Equal(seen, []int{1, 0}) {
		t.Fatalf("agent.status active jobs %v, want [1 0]", seen)
	}
}

func TestRejectsWhenBusyAndAcksARepeatedDispatch(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, func(c *Config) { c.MaxJobs = 1 })
	c, _ := h.connect(t, proto.RegisterAck{})
	c.Send(t, dispatch("job-1", 1, "block"))
	expectAck(t, c)
	x := h.exec(t)
	c.Send(t, dispatch("job-2", 4, "block"))
	c.Send(t, dispatch("job-1", 1, "block")) // the same dispatch again
	var rejected, acked bool
	for !rejected || !acked {
		switch m := c.Next(t).Msg.(type) {
		case *proto.JobReject:
			if m.JobID != "job-2" || m.LeaseEpoch != 4 || m.Reason != proto.RejectBusy {
				t.Fatalf("reject %+v", m)
			}
			rejected = true
		case *proto.JobAck:
			if m.JobID != "job-1" {
				t.Fatalf("ack %+v", m)
			}
			acked = true
		}
	}
	x.Release()
}

func TestRejectsUnusableSpecs(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c, _ := h.connect(t, proto.RegisterAck{})
	c.Send(t, dispatch("job-1", 1)) // no steps: the runner refuses it
	rej := c.Expect(t, proto.TypeJobReject).Msg.(*proto.JobReject)
	if rej.Reason != proto.RejectInvalid || rej.Message != "the job has no steps" {
		t.Fatalf("reject %+v", rej)
	}
	bad := dispatch("job-2", 2, "lines 1")
	bad.Spec.Steps[0].TimeoutMS = -5 // fails proto validation on the agent
	c.Send(t, bad)
	rej = c.Expect(t, proto.TypeJobReject).Msg.(*proto.JobReject)
	if rej.JobID != "job-2" || rej.Reason != proto.RejectInvalid || !strings.Contains(rej.Message, "timeout_ms must not be negative") {
		t.Fatalf("reject %+v", rej)
	}
	// The connection survives both.
	c.Send(t, dispatch("job-3", 1, "lines 1"))
	expectAck(t, c)
}

func TestCancelGracefulAndForced(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c, _ := h.connect(t, proto.RegisterAck{})
	c.SetAutoAck(true)
	for _, force := range []bool{false, true} {
		id := "job-graceful"
		if force {
			id = "job-forced"
		}
		c.Send(t, dispatch(id, 2, "block", "lines 5"))
		expectAck(t, c)
		x := h.exec(t)
		c.Send(t, &proto.Cancel{JobID: id, LeaseEpoch: 1, Force: !force}) // another lease: ignored
		c.Send(t, &proto.Cancel{JobID: id, LeaseEpoch: 2, Force: force, Reason: "user"})
		if got := forceOf(t, x); got != force {
			t.Fatalf("%s: cancel force %v", id, got)
		}
		frames := durable(t, c, id)
		final := frames[len(frames)-1].Msg.(*proto.JobStatus)
		if final.Status != kiln.JobCancelled {
			t.Fatalf("%s: final %+v", id, final)
		}
		if len(x.forces) != 0 {
			t.Fatalf("%s: cancelled %d more times", id, len(x.forces))
		}
	}
}

// writeLog records the agent's writes to its connection.
type writeLog struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, append([]byte(nil), p...))
	w.mu.Unlock()
	return w.Conn.Write(p)
}

// types lists the frame types of each write.
func (w *writeLog) types() [][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out [][]string
	for _, b := range w.writes {
		out = append(out, agenttest.WrittenTypes(b))
	}
	return out
}

// A job's acknowledgement and its running status leave in one write, so
// the orchestrator wakes and reads once for both (package cork).
func TestTheAckLeavesWithTheRunningStatusInOneWrite(t *testing.T) {
	orch := agenttest.New(t)
	orch.SetAutoAck(true)
	var mu sync.Mutex
	var logs []*writeLog
	h := startAgent(t, orch, func(c *Config) {
		c.MaxJobs = 1
		c.netHook = func(nc net.Conn) net.Conn {
			w := &writeLog{Conn: nc}
			mu.Lock()
			logs = append(logs, w)
			mu.Unlock()
			return w
		}
	})
	c, _ := h.connect(t, proto.RegisterAck{})
	const jobs = 3
	for i := range jobs {
		id := fmt.Sprintf("job-%d", i)
		c.Send(t, dispatch(id, 3, "lines 1"))
		expectAck(t, c)
		durable(t, c, id)
	}
	mu.Lock()
	w := logs[len(logs)-1]
	mu.Unlock()
	together := 0
	for _, g := range w.types() {
		if i := slices.Index(g, proto.TypeJobAck); i >= 0 {
			if !slices.Contains(g[i:], proto.TypeJobStatus) {
				t.Fatalf("an ack left without its running status: writes %q", w.types())
			}
			together++
		}
	}
	if together != jobs {
		t.Fatalf("%d of %d acks were written with their running status: %q", together, jobs, w.types())
	}
}
