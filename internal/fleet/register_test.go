package fleet

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// The handshake's deadlines and refusals, each with its error frame and
// close code.
// Proves B41 and B43 (docs/behaviours.md).
func TestHandshakeRefusals(t *testing.T) {
	cfg := fastConfig()
	cfg.AuthTimeout, cfg.RegisterTimeout = 150*time.Millisecond, 150*time.Millisecond
	h := start(t, storetest.Backends[0], options{cfg: cfg})
	_, secret := h.token(store.AgentTokenSpec{})
	scoped, scopedSecret := h.token(store.AgentTokenSpec{Labels: kiln.NewLabels("docker")})
	_ = scoped

	t.Run("no auth in time", func(t *testing.T) {
		c := dial(t, h.url)
		if code, reason := c.closed(); code != proto.CloseAuthTimeout || !strings.Contains(reason, "no auth frame") {
			t.Fatalf("close %d %q", code, reason)
		}
	})
	t.Run("no register in time", func(t *testing.T) {
		c := dial(t, h.url)
		c.send(&proto.Auth{Token: secret, ProtocolVersion: proto.Version})
		expect[*proto.AuthOK](c)
		if code, _ := c.closed(); code != proto.CloseAuthTimeout {
			t.Fatalf("close %d", code)
		}
	})
	t.Run("first frame not auth", func(t *testing.T) {
		c := dial(t, h.url)
		c.send(&proto.Register{AgentID: "x", AgentSecret: testSecret("x"), MaxJobs: 1})
		if e := c.errorFrame(); e.Code != proto.ErrUnauthorized {
			t.Fatalf("error %+v", e)
		}
		if code, _ := c.closed(); code != proto.CloseUnauthorized {
			t.Fatalf("close %d", code)
		}
	})
	t.Run("bad token", func(t *testing.T) {
		c := dial(t, h.url)
		c.send(&proto.Auth{Token: "kat_wrong", ProtocolVersion: proto.Version})
		if e := c.errorFrame(); e.Code != proto.ErrUnauthorized {
			t.Fatalf("error %+v", e)
		}
		if code, _ := c.closed(); code != proto.CloseAuthFailed {
			t.Fatalf("close %d", code)
		}
	})
	t.Run("protocol version", func(t *testing.T) {
		c := dial(t, h.url)
		c.send(&proto.Auth{Token: secret, ProtocolVersion: proto.Version + 1})
		if e := c.errorFrame(); e.Code != proto.ErrProtocol {
			t.Fatalf("error %+v", e)
		}
		if code, _ := c.closed(); code != proto.CloseProtocol {
			t.Fatalf("close %d", code)
		}
	})
	t.Run("frame other than register", func(t *testing.T) {
		c := dial(t, h.url)
		c.send(&proto.Auth{Token: secret, ProtocolVersion: proto.Version})
		expect[*proto.AuthOK](c)
		c.send(&proto.Heartbeat{Time: time.Now()})
		if e := c.errorFrame(); e.Code != proto.ErrNotRegistered {
			t.Fatalf("error %+v", e)
		}
		if code, _ := c.closed(); code != proto.CloseInvalidMessage {
			t.Fatalf("close %d", code)
		}
	})
	t.Run("labels outside the token's scope", func(t *testing.T) {
		c := dial(t, h.url)
		c.send(&proto.Auth{Token: scopedSecret, ProtocolVersion: proto.Version})
		expect[*proto.AuthOK](c)
		c.send(&proto.Register{AgentID: "scoped-1", AgentSecret: testSecret("scoped-1"), Labels: []string{"docker", "gpu"}, MaxJobs: 1, OS: "linux", Arch: "amd64"})
		if e := c.errorFrame(); e.Code != proto.ErrUnauthorized || !strings.Contains(e.Message, "gpu") {
			t.Fatalf("error %+v", e)
		}
		if code, _ := c.closed(); code != proto.CloseAuthFailed {
			t.Fatalf("close %d", code)
		}
		if h.f.reg.get("scoped-1") != nil {
			t.Fatal("a refused agent was registered")
		}
		// Within the scope (the OS and architecture are kiln's own).
		_, ack := h.connect(scopedSecret, reg{id: "scoped-2", labels: []string{"docker", "linux", "amd64"}})
		if strings.Join(ack.Labels, ",") != "amd64,docker,linux" {
			t.Fatalf("labels %v", ack.Labels)
		}
	})
}

// A single-use token is consumed by its first registration: the agent it
// registered may reconnect with it, no other agent may use it.
// Proves B42 (docs/behaviours.md).
func TestSingleUseTokenConsumedByRegistration(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{SingleUse: true})
		c, _ := h.connect(secret, reg{id: "eph-1"})
		c.ws.CloseNow()
		waittest.Until(t, waittest.Timeout, "the agent is unregistered", func() bool { return h.f.reg.get("eph-1") == nil })
		h.connect(secret, reg{id: "eph-1"}) // the same agent back after a blip

		other := registerRefused(t, h.url, secret, "eph-2")
		if code, _ := other.closed(); code != proto.CloseAuthFailed {
			t.Fatalf("close %d", code)
		}
	})
}

// B44: a registration whose agent id is held — live or
// mid-registration, on any connection — by a connection with a different
// token gets AGENT_ID_IN_USE and close 4003; the existing registration is
// untouched.
func TestAgentIDInUse(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, tokenA := h.token(store.AgentTokenSpec{Name: "a"})
		_, tokenB := h.token(store.AgentTokenSpec{Name: "b"})
		refused := func(token, id string) {
			t.Helper()
			c := dial(t, h.url)
			c.send(&proto.Auth{Token: token, ProtocolVersion: proto.Version})
			expect[*proto.AuthOK](c)
			c.send(&proto.Register{AgentID: id, AgentSecret: testSecret(id), MaxJobs: 1})
			if e := c.errorFrame(); e.Code != proto.ErrAgentIDInUse {
				t.Fatalf("error %+v", e)
			}
			if code, _ := c.closed(); code != proto.CloseInvalidMessage {
				t.Fatalf("close %d", code)
			}
		}

		// Live.
		a, _ := h.connect(tokenA, reg{id: "x"})
		refused(tokenB, "x")
		_, jobs := h.run(job("j", "linux"))
		d := expect[*proto.Dispatch](a) // the holder still works
		if d.JobID != jobs["j"] || h.f.reg.get("x").c.tokenID() == "" {
			t.Fatalf("dispatch %+v", d)
		}
		a.runJob(d, kiln.JobSuccess)

		// Mid-registration: a registration of "y" is held inside its
		// critical section while another token tries the id.
		entered, release := make(chan struct{}), make(chan struct{})
		hook := func(id string) {
			if id == "y" {
				close(entered)
				<-release
			}
		}
		h.f.hooks.registering.Store(&hook)
		first := dial(t, h.url)
		first.send(&proto.Auth{Token: tokenA, ProtocolVersion: proto.Version})
		expect[*proto.AuthOK](first)
		first.send(&proto.Register{AgentID: "y", AgentSecret: testSecret("y"), MaxJobs: 1})
		<-entered
		refused(tokenB, "y")
		close(release)
		expect[*proto.RegisterAck](first)
		h.f.hooks.registering.Store(nil)
		if ag := h.f.reg.get("y"); ag == nil || ag.c.tokenID() == "" {
			t.Fatal("the first registration did not complete")
		}
	})
}

// B45: the same token reconnecting replaces the old
// socket (4009); a new token is accepted once the old connection closed,
// was dropped by the heartbeat monitor or its token was revoked; one static
// token serves several agent ids.
func TestAgentIDReuseAccepted(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		cfg := fastConfig()
		cfg.HeartbeatInterval, cfg.UnhealthyAfter, cfg.DropAfter = time.Second, 2*time.Second, 3*time.Second
		h := start(t, b, options{cfg: cfg, fakeClock: true})
		tkA, tokenA := h.token(store.AgentTokenSpec{Name: "a"})
		_, tokenB := h.token(store.AgentTokenSpec{Name: "b"})
		_, tokenC := h.token(store.AgentTokenSpec{Name: "c"})
		_, tokenD := h.token(store.AgentTokenSpec{Name: "d"})

		// Same token: the newer connection supersedes the older.
		old, _ := h.connect(tokenA, reg{id: "x"})
		h.connect(tokenA, reg{id: "x"})
		if code, _ := old.closed(); code != proto.CloseSuperseded {
			t.Fatalf("old connection closed %d", code)
		}
		// One static token, several ids.
		h.connect(tokenA, reg{id: "x2"})
		h.connect(tokenA, reg{id: "x3"})

		// After the old connection closed.
		c, _ := h.connect(tokenA, reg{id: "closed"})
		c.ws.CloseNow()
		waittest.Until(t, waittest.Timeout, "the closed agent is gone", func() bool { return h.f.reg.get("closed") == nil })
		h.connect(tokenB, reg{id: "closed"})

		// After its token was revoked.
		rv, _ := h.connect(tokenA, reg{id: "revoked"})
		if err := h.db.Auth().RevokeAgentToken(bg, tkA.ID); err != nil {
			t.Fatal(err)
		}
		h.f.DisconnectToken(tkA.ID)
		if code, _ := rv.closed(); code != proto.CloseTokenRevoked {
			t.Fatalf("revoked connection closed %d", code)
		}
		h.connect(tokenC, reg{id: "revoked"})

		// After the heartbeat monitor dropped it.
		hb, _ := h.connect(tokenC, reg{id: "silent"})
		h.advance(4 * time.Second)
		if code, _ := hb.closed(); code != proto.CloseHeartbeat {
			t.Fatalf("silent connection closed %d", code)
		}
		h.connect(tokenD, reg{id: "silent"})
	})
}

// The endpoint refuses agents until Run has started.
func TestNotReadyBeforeRun(t *testing.T) {
	db := storetest.New(t)
	logs, err := logstore.Open(logstore.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(db, logs, NoCredentials{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + proto.Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if _, err := New(db, logs, nil, Config{}); err == nil || !strings.Contains(err.Error(), "clone credentials") {
		t.Fatalf("a fleet without clone credentials: %v", err)
	}
	if _, err := New(db, logs, NoCredentials{}, Config{UnhealthyAfter: time.Second, HeartbeatInterval: 2 * time.Second}); err == nil ||
		!strings.Contains(err.Error(), "UnhealthyAfter") {
		t.Fatalf("a bad config was accepted: %v", err)
	}
}

// OnRegister is told of each registration once it is committed (the
// agent's row is in the store when the hook runs), once per registration,
// and never of a refused one.
func TestOnRegisterFollowsTheCommit(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		var db atomic.Pointer[store.DB]
		var mu sync.Mutex
		var told []string
		cfg := fastConfig()
		cfg.OnRegister = func(id string) {
			recs, err := db.Load().Auth().ListAgents(bg)
			if err != nil {
				t.Error(err)
			}
			stored := slices.ContainsFunc(recs, func(r store.AgentRecord) bool { return r.ID == id })
			mu.Lock()
			defer mu.Unlock()
			if !stored {
				told = append(told, id+" (not stored yet)")
				return
			}
			told = append(told, id)
		}
		h := start(t, b, options{cfg: cfg})
		db.Store(h.db)
		_, secret := h.token(store.AgentTokenSpec{SingleUse: true})
		c, _ := h.connect(secret, reg{id: "a-1"})
		c.ws.CloseNow()
		waittest.Until(t, waittest.Timeout, "the agent is unregistered", func() bool { return h.f.reg.get("a-1") == nil })
		h.connect(secret, reg{id: "a-1"})
		waittest.Until(t, waittest.Timeout, "OnRegister told of both registrations", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(told) >= 2
		})

		registerRefused(t, h.url, secret, "a-2")
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(told, []string{"a-1", "a-1"}) {
			t.Fatalf("OnRegister was told %q, want a-1 twice (each after its commit) and not the refused a-2", told)
		}
	})
}

// registerRefused authenticates with secret and registers agent id, which
// the orchestrator must refuse as unauthorized; it returns the connection.
func registerRefused(t *testing.T, url, secret, id string) *client {
	t.Helper()
	c := dial(t, url)
	c.send(&proto.Auth{Token: secret, ProtocolVersion: proto.Version})
	expect[*proto.AuthOK](c)
	c.send(&proto.Register{AgentID: id, AgentSecret: testSecret(id), MaxJobs: 1})
	if e := c.errorFrame(); e.Code != proto.ErrUnauthorized {
		t.Fatalf("register %s: error %+v, want %s", id, e, proto.ErrUnauthorized)
	}
	return c
}
