package fleet

import (
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// B48: every disconnect path — the socket closing, the
// heartbeat monitor, an ack timeout, a revoked or expired token, a newer
// connection, a protocol violation, shutdown — reaches the one disconnect
// function, which releases each of kiln's waiters on the agent: its jobs
// (handed to the store's recovery), its slots and place in the idle index,
// dispatches awaiting ack, buffered job heartbeats, and open step files.
func TestEveryDisconnectPathReleasesWaiters(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		cfg := fastConfig()
		cfg.SweepInterval, cfg.RedriveInterval = time.Hour, time.Hour // the test drives the monitor
		cfg.HeartbeatInterval, cfg.UnhealthyAfter, cfg.DropAfter = time.Second, 2*time.Second, 3*time.Second
		h := start(t, b, options{cfg: cfg, fakeClock: true,
			store: withStore(func(c *store.Config) { c.AckTimeout = time.Minute })})

		var mu sync.Mutex
		got := map[string]released{}
		kinds := map[string]string{}
		hook := func(id string, cause closeCause, rel released) {
			mu.Lock()
			got[id], kinds[id] = rel, cause.kind
			mu.Unlock()
		}
		h.f.hooks.released.Store(&hook)

		full := released{Lost: 2, Requeued: 1, Slots: 2, AwaitingAck: 1, Heartbeats: 1, StepFiles: 1}
		paths := []struct {
			name    string
			trigger func(c *client, tk store.AgentToken, secret string)
			kind    string
			want    released
			code    int
		}{
			{"socket closed", func(c *client, _ store.AgentToken, _ string) { c.ws.CloseNow() }, "read_error", full, -1},
			{"agent closed", func(c *client, _ store.AgentToken, _ string) { c.ws.Close(websocket.StatusNormalClosure, "bye") }, "closed_by_agent", full, -2},
			{"heartbeat", func(*client, store.AgentToken, string) {
				h.advance(4 * time.Second)
				h.f.checkAgents(h.clock.Now())
			}, "heartbeat_timeout", full, proto.CloseHeartbeat},
			{"ack timeout", func(*client, store.AgentToken, string) {
				h.advance(time.Minute)
				h.f.sweep(store.LeaderLease{})
			}, "ack_timeout", released{Lost: 1, Slots: 1, Heartbeats: 1, StepFiles: 1}, proto.CloseDispatchAckLate},
			{"revoked", func(_ *client, tk store.AgentToken, _ string) { h.f.DisconnectToken(tk.ID) }, "token_revoked", full, proto.CloseTokenRevoked},
			{"expired", func(*client, store.AgentToken, string) {
				h.advance(2 * time.Hour)
				h.f.checkAgents(h.clock.Now())
			}, "token_expired", full, proto.CloseAuthFailed},
			{"superseded", func(c *client, _ store.AgentToken, secret string) {
				h.connect(secret, reg{id: c.id, labels: []string{c.id}})
			}, "superseded", released{Lost: 2, Slots: 2, AwaitingAck: 1, Heartbeats: 1, StepFiles: 1}, proto.CloseSuperseded},
			{"invalid", func(c *client, _ store.AgentToken, _ string) { c.raw([]byte("nonsense")) }, "invalid_message", full, proto.CloseInvalidMessage},
			{"shutdown", func(*client, store.AgentToken, string) { h.stop() }, "shutdown",
				released{Slots: 2, AwaitingAck: 1, Heartbeats: 1, StepFiles: 1}, proto.CloseGoingAway},
		}
		for i, p := range paths {
			id := "path" + itoa(uint64(i))
			tk, secret := h.token(store.AgentTokenSpec{Name: id, ExpiresAt: h.clock.Now().Add(time.Hour)})
			c, _ := h.connect(secret, reg{id: id, labels: []string{id}, maxJobs: 2})
			_, jobs := h.run(job("started", id), job("unacked", id))
			d1, d2 := expect[*proto.Dispatch](c), expect[*proto.Dispatch](c)
			started, unacked := d1, d2
			if d1.JobID != jobs["started"] {
				started, unacked = d2, d1
			}
			c.send(&proto.JobAck{JobID: started.JobID, LeaseEpoch: 1})
			c.send(&proto.JobStatus{JobID: started.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()})
			c.send(&proto.Log{JobID: started.JobID, LeaseEpoch: 1, Step: 0, Lines: []proto.LogLine{{Seq: 1, Stream: "stdout", Text: "x"}}})
			c.send(&proto.JobHeartbeat{JobID: started.JobID, LeaseEpoch: 1})
			c.send(&proto.Heartbeat{Time: time.Now()}) // ordered after the job heartbeat: once it is read, that one is buffered
			c.waitAck(c.seq)
			waittest.Until(t, waittest.Timeout, "the job heartbeat is buffered", func() bool {
				h.f.hb.mu.Lock()
				defer h.f.hb.mu.Unlock()
				return len(h.f.hb.m) == 1
			})

			p.trigger(c, tk, secret)
			waittest.Until(t, waittest.Timeout, p.name+" reaches the disconnect function", func() bool {
				mu.Lock()
				defer mu.Unlock()
				_, ok := got[id]
				return ok
			})
			mu.Lock()
			rel, kind := got[id], kinds[id]
			mu.Unlock()
			if kind != p.kind || rel != p.want {
				t.Errorf("%s: released %+v by %q, want %+v by %q", p.name, rel, kind, p.want, p.kind)
			}
			code, _ := c.closed()
			if p.code > 0 && code != p.code {
				t.Errorf("%s: close %d, want %d", p.name, code, p.code)
			}
			if p.name == "superseded" {
				continue // the new connection holds the id
			}
			if a := h.f.reg.get(id); a != nil {
				t.Errorf("%s: the agent is still registered", p.name)
			}
			if as := h.f.reg.matching(id); len(as) != 0 {
				t.Errorf("%s: the agent is still in the idle index", p.name)
			}
			if p.name == "shutdown" {
				// The store is left for the next process.
				db, err := store.Open(bg, store.Config{URL: h.dbURL, Releaser: storetest.QueueAsCreated})
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				for id, want := range map[string]kiln.JobStatus{started.JobID: kiln.JobRunning, unacked.JobID: kiln.JobDispatched} {
					if j, err := db.Jobs().Get(bg, id); err != nil || j.Status != want {
						t.Errorf("shutdown changed job %s: %s %v", id, j.Status, err)
					}
				}
				continue
			}
			h.waitStatus(started.JobID, kiln.JobRecovering)
			h.waitStatus(unacked.JobID, kiln.JobQueued)
		}
	})
}
