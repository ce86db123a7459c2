// Package scalertest is the conformance suite every scaler backend passes:
// the agent it starts dials the server URL it was given with the token,
// agent id and labels of the request, takes one job at a time, and is gone
// once destroyed; destroying twice is harmless. The server is agenttest's
// scripted orchestrator speaking the real protocol.
package scalertest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/agent/agenttest"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/scaler"
)

// Timeout bounds each wait of the suite (an agent may take seconds to
// start on a loaded machine).
var Timeout = time.Minute

// Run runs the suite against the backend newBackend returns.
func Run(t *testing.T, newBackend func(t *testing.T) scaler.Backend) {
	t.Run("RegistersWithTheRequestsTokenIDAndLabels", func(t *testing.T) { registers(t, newBackend(t)) })
	t.Run("DestroyStopsAnAgentThatNeverRegistered", func(t *testing.T) { destroyUnregistered(t, newBackend(t)) })
}

type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(typ, _ string) {
	e.mu.Lock()
	e.got = append(e.got, typ)
	e.mu.Unlock()
}

func (e *events) types() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

func registers(t *testing.T, b scaler.Backend) {
	agenttest.Timeout = Timeout
	orch := agenttest.New(t)
	ev := &events{}
	req := scaler.SpawnRequest{AgentID: "scaler-test-0a1b2c3d", Labels: []string{"scaled", "conformance"},
		ServerURL: orch.URL(), Token: "kat_conformance_token", Event: ev.add}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	inst, err := b.Spawn(ctx, req)
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	defer func() { _ = inst.Destroy(context.Background(), "shutdown") }()
	c := orch.Accept(t)
	auth, reg := c.Handshake(t, proto.RegisterAck{HeartbeatIntervalMS: 1000, JobHeartbeatIntervalMS: 1000})
	if auth.Token != req.Token {
		t.Fatalf("the agent presented token %q, not the request's", auth.Token)
	}
	if reg.AgentID != req.AgentID || reg.MaxJobs != 1 {
		t.Fatalf("registered as %q with max_jobs %d, want %q and 1", reg.AgentID, reg.MaxJobs, req.AgentID)
	}
	for _, l := range req.Labels {
		if !slices.Contains(reg.Labels, l) {
			t.Fatalf("registered labels %v lack %q", reg.Labels, l)
		}
	}
	if types := ev.types(); !slices.Contains(types, scaler.EventReady) {
		t.Fatalf("events %v have no %s", types, scaler.EventReady)
	}
	if err := inst.Destroy(ctx, "job-complete"); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	select {
	case <-inst.Exited():
	case <-time.After(Timeout):
		t.Fatal("the agent is still there after Destroy returned")
	}
	if err := inst.Destroy(ctx, "job-complete"); err != nil {
		t.Fatalf("a second destroy: %v", err)
	}
}

func destroyUnregistered(t *testing.T, b scaler.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	// Nothing listens there: the agent keeps retrying until destroyed.
	req := scaler.SpawnRequest{AgentID: "scaler-test-0e0f1011", Labels: []string{"scaled"},
		ServerURL: "http://127.0.0.1:9", Token: "kat_unused", Event: func(string, string) {}}
	inst, err := b.Spawn(ctx, req)
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	if err := inst.Destroy(ctx, "spawn-timeout"); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	select {
	case <-inst.Exited():
	case <-time.After(Timeout):
		t.Fatal("the agent is still there after Destroy returned")
	}
}
