package store_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// Proves B41 (docs/behaviours.md).
func TestAgentTokens(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		tk, secret, err := a.CreateAgentToken(ctx, store.AgentTokenSpec{Name: "gpu pool", Labels: kiln.NewLabels("linux", "gpu"),
			Mandatory: kiln.NewLabels("gpu"), CreatedBy: "cli:admin"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, store.AgentTokenPrefix) || !strings.HasPrefix(secret, tk.Prefix) || len(tk.Prefix) != 12 {
			t.Fatalf("secret %q prefix %q", secret, tk.Prefix)
		}
		// Only the hash is stored.
		var stored int
		if err := db.SQL().QueryRow("SELECT COUNT(*) FROM agent_tokens WHERE hash = '" + store.HashToken(secret) + "'").Scan(&stored); err != nil || stored != 1 {
			t.Fatalf("hash row %d %v", stored, err)
		}
		var leaked int
		_ = db.SQL().QueryRow("SELECT COUNT(*) FROM agent_tokens WHERE hash = '" + secret + "' OR prefix = '" + secret + "'").Scan(&leaked)
		if leaked != 0 {
			t.Fatal("the secret is stored")
		}
		got, err := a.AuthenticateAgent(ctx, secret)
		if err != nil || got.ID != tk.ID || got.Labels.Key() != "gpu,linux" || got.Mandatory.Key() != "gpu" || got.LastUsedAt.IsZero() {
			t.Fatalf("authenticate %+v %v", got, err)
		}
		// Unscoped token: nil labels.
		free, freeSecret, _ := a.CreateAgentToken(ctx, store.AgentTokenSpec{Name: "free"})
		if free.Labels != nil {
			t.Fatalf("unscoped token labels %v", free.Labels)
		}
		for _, bad := range []string{"", "kat_nope", secret + "x"} {
			if _, err := a.AuthenticateAgent(ctx, bad); !errors.Is(err, store.ErrUnauthorized) || kiln.ErrorCode(err) != kiln.CodeUnauthorized {
				t.Fatalf("bad secret %q: %v", bad, err)
			}
		}
		if err := a.RevokeAgentToken(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AuthenticateAgent(ctx, secret); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("revoked token: %v", err)
		}
		if err := a.RevokeAgentToken(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("revoke unknown: %v", err)
		}
		// Expiry.
		_, expSecret, _ := a.CreateAgentToken(ctx, store.AgentTokenSpec{Name: "eph", ExpiresAt: clock.Now().Add(time.Hour)})
		if _, err := a.AuthenticateAgent(ctx, expSecret); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		if _, err := a.AuthenticateAgent(ctx, expSecret); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("expired token: %v", err)
		}
		if _, err := a.AuthenticateAgent(ctx, freeSecret); err != nil {
			t.Fatal(err)
		}
		list, err := a.ListAgentTokens(ctx)
		if err != nil || len(list) != 3 || list[2].ID != tk.ID || list[2].RevokedAt.IsZero() {
			t.Fatalf("list %+v %v", list, err)
		}
		if _, _, err := a.CreateAgentToken(ctx, store.AgentTokenSpec{Labels: kiln.Labels{"a,b"}}); kiln.ErrorCode(err) != kiln.CodeInvalid {
			t.Fatalf("bad label: %v", err)
		}
	})
}

// A single-use token is consumed atomically: of many agents presenting it
// at once, exactly one gets in.
// Proves B42 (docs/behaviours.md).
func TestSingleUseToken(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		_, secret, err := db.Auth().CreateAgentToken(ctx, store.AgentTokenSpec{Name: "bootstrap", SingleUse: true, CreatedBy: "bootstrap:host-1"})
		if err != nil {
			t.Fatal(err)
		}
		var ok atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tk, err := db.Auth().AuthenticateAgent(ctx, secret)
				switch {
				case err == nil:
					if tk.ConsumedAt.IsZero() {
						t.Error("consumed_at not set")
					}
					ok.Add(1)
				case !errors.Is(err, store.ErrUnauthorized):
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 1 {
			t.Fatalf("%d agents got in with a single-use token", ok.Load())
		}
	})
}

func TestAdminTokens(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		tk, secret, err := a.CreateAdminToken(ctx, "ops", time.Time{})
		if err != nil || !strings.HasPrefix(secret, store.AdminTokenPrefix) {
			t.Fatalf("%+v %q %v", tk, secret, err)
		}
		got, err := a.AuthenticateAdmin(ctx, secret)
		if err != nil || got.ID != tk.ID || !got.LastUsedAt.Equal(clock.Now()) {
			t.Fatalf("authenticate %+v %v", got, err)
		}
		first := got.LastUsedAt
		clock.Advance(10 * time.Second)
		got, _ = a.AuthenticateAdmin(ctx, secret)
		if !got.LastUsedAt.Equal(first) {
			t.Fatal("last_used_at was written again within a minute")
		}
		clock.Advance(time.Minute)
		got, _ = a.AuthenticateAdmin(ctx, secret)
		if !got.LastUsedAt.Equal(clock.Now()) {
			t.Fatal("last_used_at was not refreshed after a minute")
		}
		if _, _, err := a.CreateAdminToken(ctx, " ", time.Time{}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("unnamed token: %v", err)
		}
		if _, _, err := a.CreateAdminToken(ctx, "backup", time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.RevokeAdminToken(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AuthenticateAdmin(ctx, secret); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("revoked admin token: %v", err)
		}
		list, _ := a.ListAdminTokens(ctx)
		if len(list) != 2 || list[1].Name != "ops" || list[1].RevokedAt.IsZero() {
			t.Fatalf("list %+v", list)
		}
	})
}

func TestAgentsTable(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		rec := store.AgentRecord{ID: "agent-1", Labels: kiln.AgentLabels{Labels: kiln.NewLabels("linux", "gpu"), Mandatory: kiln.NewLabels("gpu")},
			TokenID: "tok", Hostname: "h1", Version: "0.1.0"}
		if err := a.UpsertAgent(ctx, rec); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := a.SetAgentConnected(ctx, "agent-1", false); err != nil {
			t.Fatal(err)
		}
		rec.Version = "0.2.0"
		if err := a.UpsertAgent(ctx, store.AgentRecord{ID: "agent-0"}); err != nil {
			t.Fatal(err)
		}
		list, err := a.ListAgents(ctx)
		if err != nil || len(list) != 2 || list[1].ID != "agent-1" || list[1].Connected || list[1].Labels.Mandatory.Key() != "gpu" ||
			!list[1].LastSeenAt.Equal(clock.Now()) || list[1].Hostname != "h1" || !list[0].Connected {
			t.Fatalf("agents %+v %v", list, err)
		}
		if err := a.SetAgentConnected(ctx, "ghost", true); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown agent: %v", err)
		}
		if err := a.UpsertAgent(ctx, store.AgentRecord{}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("agent without id: %v", err)
		}
	})
}

// TestKnownLabelsAreTheDistinctSetsOfAgentsStillAround: the sweeps' view
// of the fleet — one entry per label set among the agents connected or
// seen since the cutoff, however many agents share it.
func TestKnownLabelsAreTheDistinctSetsOfAgentsStillAround(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		gpu := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "gpu"), Mandatory: kiln.NewLabels("gpu")}
		arm := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "arm64")}
		for id, l := range map[string]kiln.AgentLabels{"old-arm": arm, "gpu-1": gpu, "gpu-2": gpu, "linux-1": linux, "linux-2": linux} {
			if err := a.UpsertAgent(ctx, store.AgentRecord{ID: id, Labels: l}); err != nil {
				t.Fatal(err)
			}
		}
		// old-arm and gpu-1 left two days ago, gpu-2 an hour ago; the
		// linux agents are connected, however long ago they were seen.
		for _, id := range []string{"old-arm", "gpu-1", "gpu-2"} {
			if err := a.SetAgentConnected(ctx, id, false); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(47 * time.Hour)
		if err := a.SetAgentConnected(ctx, "gpu-2", false); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		known, err := a.KnownLabels(ctx, clock.Now().Add(-24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range known {
			got = append(got, l.Labels.Key()+"/"+l.Mandatory.Key())
		}
		slices.Sort(got)
		if want := []string{"amd64,linux/", "gpu,linux/gpu"}; !slices.Equal(got, want) {
			t.Fatalf("known label sets %q, want %q", got, want)
		}
	})
}

func TestSources(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		s := db.Sources()
		gh, err := s.Create(ctx, store.Source{Kind: kiln.SourceGitHub, Name: "github.com", Config: json.RawMessage(`{"app_id":1}`)})
		if err != nil || gh.ID == "" || string(gh.Config) != `{"app_id":1}` {
			t.Fatalf("create %+v %v", gh, err)
		}
		if _, err := s.Create(ctx, store.Source{Kind: kiln.SourceGitea, Name: "github.com"}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate name: %v", err)
		}
		for _, bad := range []store.Source{{Kind: "svn", Name: "x"}, {Kind: kiln.SourceLocal}, {Kind: kiln.SourceLocal, Name: "x", Config: json.RawMessage("{")}} {
			if _, err := s.Create(ctx, bad); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("bad source %+v: %v", bad, err)
			}
		}
		local, _ := s.Create(ctx, store.Source{Kind: kiln.SourceLocal, Name: "here"})
		gh.Config, gh.Name = json.RawMessage(`{"app_id":2}`), "gh"
		clock.Advance(time.Second)
		if err := s.Update(ctx, gh); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetByName(ctx, "gh")
		if err != nil || string(got.Config) != `{"app_id":2}` || !got.UpdatedAt.Equal(clock.Now()) || got.CreatedAt.Equal(got.UpdatedAt) {
			t.Fatalf("updated %+v %v", got, err)
		}
		local.Name = "gh"
		if err := s.Update(ctx, local); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("rename onto a taken name: %v", err)
		}
		list, _ := s.List(ctx)
		if len(list) != 2 || list[0].Name != "gh" || list[1].Name != "here" {
			t.Fatalf("list %+v", list)
		}
		if err := s.Delete(ctx, gh.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, gh.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted source: %v", err)
		}
		if err := s.Delete(ctx, gh.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("delete twice: %v", err)
		}
	})
}
