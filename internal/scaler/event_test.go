package scaler

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// hookLog is a webhook receiver recording what it was sent.
type hookLog struct {
	mu     sync.Mutex
	events []string // "<event> <agent> <reason>"
	status int
	answer string
}

func (h *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var v struct {
		AgentID string `json:"agent_id"`
		Reason  string `json:"reason"`
	}
	_ = json.Unmarshal(body, &v)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !VerifySignature([]byte("secret"), body, r.Header.Get(HeaderSignature)) {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	h.events = append(h.events, strings.TrimSpace(r.Header.Get(HeaderEvent)+" "+v.AgentID+" "+v.Reason))
	if h.status != 0 {
		http.Error(w, h.answer, h.status)
	}
}

func (h *hookLog) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.events...)
}

func eventConfig(target string) Config {
	return Config{Name: "cloud", Type: "event", Labels: kiln.Labels{"cloudy"}, MaxAgents: 2, TargetURL: target,
		SecretEnv: "KILN_TEST_SECRET", ClaimTTL: time.Minute}
}

func secretEnv(k string) string {
	if k == "KILN_TEST_SECRET" {
		return "secret"
	}
	return ""
}

// A receiver refusing the scale-up makes the spawn fail with its answer;
// an event scaler whose secret variable is empty is refused at start,
// naming secret_env.
// Proves B148 (docs/behaviours.md).
func TestEventBackendRefusedWebhookAndMissingSecret(t *testing.T) {
	h := &hookLog{status: http.StatusServiceUnavailable, answer: "no capacity in eu-west-1"}
	srv := httptest.NewServer(h)
	defer srv.Close()
	db := storetest.New(t)
	b := &EventBackend{DB: db, Getenv: secretEnv}
	c := eventConfig(srv.URL + "/hook?token=hidden")
	_, err := b.Spawn(context.Background(), SpawnRequest{AgentID: "scaler-event-0000000f", Labels: c.Labels,
		ServerURL: "http://kiln.test", Scaler: c, Event: func(string, string) {}})
	if err == nil || !strings.Contains(err.Error(), "the receiver answered 503 Service Unavailable: no capacity in eu-west-1") ||
		strings.Contains(err.Error(), "hidden") {
		t.Fatalf("spawn error %v", err)
	}
	_, err = NewManager(db, ManagerConfig{Scalers: []Config{eventConfig(srv.URL)}, Instance: "s",
		Backends: map[string]Backend{"event": &EventBackend{DB: db, Getenv: func(string) string { return "" }}}})
	if err == nil || !strings.Contains(err.Error(), "secret_env") || !strings.Contains(err.Error(), "KILN_TEST_SECRET") {
		t.Fatalf("start with no secret: %v", err)
	}
}

// Only the leader reaps an event spawn whose agent never came: a server
// that does not lead leaves it; the leader releases it, counts the failure
// (backend event), sends one scale-down with spawn-timeout and backs off;
// the owner, not leading, then forgets its spawn without a second
// scale-down.
// Proves B150, B151 (docs/behaviours.md).
func TestEventReaperIsLeaderOnly(t *testing.T) {
	h := &hookLog{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	clock := storetest.NewClock()
	db := storetest.New(t, storetest.WithClock(clock.Now))
	c := eventConfig(srv.URL)
	c.ClaimTTL = 10 * time.Second
	var fails []string
	var mu sync.Mutex
	newM := func(instance string, leading bool) *Manager {
		m, err := NewManager(db, ManagerConfig{Scalers: []Config{c}, Instance: instance, Clock: clock.Now,
			Backends: map[string]Backend{"event": &EventBackend{DB: db, Getenv: secretEnv, Clock: clock.Now}},
			Leading:  func() bool { return leading },
			Hooks: Hooks{SpawnFailed: func(backend string, bound bool) {
				mu.Lock()
				defer mu.Unlock()
				fails = append(fails, backend)
			}}})
		if err != nil {
			t.Fatal(err)
		}
		m.SetFleet(idleFleet{})
		return m
	}
	owner, leader := newM("server-1", false), newM("server-2", true)
	ctx := context.Background()
	// The owner starts a warm-pool agent through the backend.
	if err := owner.spawn(ctx, owner.scalers[0], "", "", kiln.Resources{}); err != nil {
		t.Fatal(err)
	}
	owner.spawns.Wait()
	ups := h.got()
	if len(ups) != 1 || !strings.HasPrefix(ups[0], "scale-up scaler-event-") {
		t.Fatalf("webhooks %v", ups)
	}
	id := strings.Fields(ups[0])[1]
	if st := owner.Statuses()[0]; st.Spawning != 1 {
		t.Fatalf("owner status %+v", st)
	}
	clock.Advance(11 * time.Second)
	owner.reapProvisions(ctx)
	if _, err := db.Scalers().Get(ctx, id); err != nil {
		t.Fatalf("a server that does not lead reaped: %v", err)
	}
	leader.reapProvisions(ctx)
	if _, err := db.Scalers().Get(ctx, id); err == nil {
		t.Fatal("the leader did not reap")
	}
	if got := h.got(); len(got) != 2 || got[1] != "scale-down "+id+" spawn-timeout" {
		t.Fatalf("webhooks %v", got)
	}
	if len(fails) != 1 || fails[0] != "event" {
		t.Fatalf("failures counted %v", fails)
	}
	if st := leader.Statuses()[0]; st.ConsecutiveFailures != 1 || !strings.Contains(st.LastError, "never redeemed its claim code") {
		t.Fatalf("leader status %+v", st)
	}
	clock.Advance(5 * time.Second)
	owner.reapProvisions(ctx)
	if st := owner.Statuses()[0]; st.Active != 0 || st.ConsecutiveFailures != 1 {
		t.Fatalf("owner status after the reap %+v", st)
	}
	if got := h.got(); len(got) != 2 {
		t.Fatalf("webhooks after the owner forgot %v", got)
	}
	if n, _ := db.Scalers().Count(ctx); n["cloud"] != 0 {
		t.Fatalf("spawns left %v", n)
	}
}

// Anything but the signature of the body with the secret is refused.
// Proves B148 (docs/behaviours.md).
func FuzzVerifySignature(f *testing.F) {
	f.Add([]byte(`{"event":"scale-up"}`), "sha256=00")
	f.Add([]byte(""), Sign([]byte("k"), nil))
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		secret := []byte("fuzz-secret")
		if VerifySignature(secret, body, header) && header != Sign(secret, body) &&
			!strings.EqualFold(header, Sign(secret, body)) {
			t.Fatalf("%q verifies for %q", header, body)
		}
		if !VerifySignature(secret, body, Sign(secret, body)) {
			t.Fatal("the body's own signature does not verify")
		}
		if VerifySignature(nil, body, Sign(nil, body)) {
			t.Fatal("an empty secret verifies")
		}
	})
}

// An event spawn the server's previous process made whose agent is not
// back within the recovery window is released and scaled down with
// heartbeat-timeout.
// Proves B151 (docs/behaviours.md).
func TestEventSpawnOfThePreviousProcessScaledDownAfterTheWindow(t *testing.T) {
	h := &hookLog{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	clock := storetest.NewClock()
	db := storetest.New(t, storetest.WithClock(clock.Now))
	ctx := context.Background()
	if ok, err := db.Scalers().Claim(ctx, store.Spawn{AgentID: "scaler-event-0000aaaa", Scaler: "cloud", Owner: "server-1"}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	m, err := NewManager(db, ManagerConfig{Scalers: []Config{eventConfig(srv.URL)}, Instance: "server-1", Clock: clock.Now,
		RecoveryWindow: time.Minute, Backends: map[string]Backend{"event": &EventBackend{DB: db, Getenv: secretEnv, Clock: clock.Now}}})
	if err != nil {
		t.Fatal(err)
	}
	m.SetFleet(idleFleet{})
	m.recover(ctx)
	m.expire(ctx)
	if got := h.got(); len(got) != 0 {
		t.Fatalf("scaled down inside the window: %v", got)
	}
	clock.Advance(61 * time.Second)
	m.expire(ctx)
	if got := h.got(); len(got) != 1 || got[0] != "scale-down scaler-event-0000aaaa heartbeat-timeout" {
		t.Fatalf("webhooks %v", got)
	}
	if _, err := db.Scalers().Get(ctx, "scaler-event-0000aaaa"); err == nil {
		t.Fatal("the spawn is still there")
	}
}
