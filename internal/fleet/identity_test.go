package fleet

import (
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// Attacks on an agent's id by real WebSocket clients holding a valid
// token: the same shared token as a live agent, another token after a
// single-use agent disconnected, the single-use agent's own token leaked,
// and a token bound to another id. Without the id's secret each is
// refused with AGENT_ID_BOUND (or UNAUTHORIZED) and close 4010, and the
// agent that owns the id is not disturbed.
// Proves B113 (docs/behaviours.md).
func TestAgentIDIsBoundToItsSecret(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, shared := h.token(store.AgentTokenSpec{Name: "shared"})
		_, single := h.token(store.AgentTokenSpec{Name: "ephemeral", SingleUse: true})
		_, bound := h.token(store.AgentTokenSpec{Name: "bound", AgentID: "bound-1"})
		attack := func(token, id, secret, code, message string) {
			t.Helper()
			c := dial(t, h.url)
			c.send(&proto.Auth{Token: token, ProtocolVersion: proto.Version})
			expect[*proto.AuthOK](c)
			c.send(&proto.Register{AgentID: id, AgentSecret: secret, MaxJobs: 1, OS: "linux", Arch: "amd64"})
			if e := c.errorFrame(); e.Code != code || !strings.Contains(e.Message, message) {
				t.Fatalf("%s with %s: error %+v, want %s %q", id, secret, e, code, message)
			}
			if got, _ := c.closed(); got != proto.CloseAuthFailed {
				t.Fatalf("%s: close %d, want %d", id, got, proto.CloseAuthFailed)
			}
		}
		forged := testSecret("someone else")

		// The same shared token cannot supersede a live agent.
		victim, _ := h.connect(shared, reg{id: "victim"})
		attack(shared, "victim", forged, proto.ErrAgentIDBound, "belongs to another agent")
		if a := h.f.reg.get("victim"); a == nil || a.c.id != victim.connID {
			t.Fatal("the attacker displaced the live agent")
		}
		_, jobs := h.run(job("j", "linux"))
		d := expect[*proto.Dispatch](victim) // the victim still gets work
		if d.JobID != jobs["j"] {
			t.Fatalf("dispatch %+v", d)
		}
		victim.runJob(d, kiln.JobSuccess)
		// Its own secret still reconnects it (superseding, B45).
		h.connect(shared, reg{id: "victim"})
		if code, _ := victim.closed(); code != proto.CloseSuperseded {
			t.Fatalf("the victim's old socket closed %d", code)
		}

		// Nobody squats the id of a disconnected single-use agent: not with
		// another token, not with its own token leaked.
		eph, _ := h.connect(single, reg{id: "eph-1"})
		eph.ws.CloseNow()
		waittest.Until(t, waittest.Timeout, "the ephemeral agent is gone", func() bool { return h.f.reg.get("eph-1") == nil })
		attack(shared, "eph-1", forged, proto.ErrAgentIDBound, "eph-1 belongs to another agent")
		attack(single, "eph-1", forged, proto.ErrAgentIDBound, "eph-1 belongs to another agent")
		if h.f.reg.get("eph-1") != nil {
			t.Fatal("a squatter registered the id")
		}
		h.connect(single, reg{id: "eph-1"}) // the agent itself comes back

		// A token bound to an id registers that id only.
		attack(bound, "elsewhere", testSecret("elsewhere"), proto.ErrUnauthorized, "bound to agent id bound-1")
		h.connect(bound, reg{id: "bound-1"})

		recs, err := h.db.Auth().ListAgents(bg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.ID == "elsewhere" {
				t.Fatalf("a refused registration was recorded: %+v", r)
			}
		}
	})
}
