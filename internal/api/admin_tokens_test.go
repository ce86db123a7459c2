package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// forEachWithClock is forEach with the store's and the API's clock under
// the test's hand.
func forEachWithClock(t *testing.T, fn func(t *testing.T, h *apitest.Harness, clock *storetest.Clock)) {
	clock := storetest.NewClock()
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		fn(t, apitest.New(t, db, func(c *api.Config) { c.Clock = clock.Now }), clock)
	}, storetest.ReleaseWith(engine.Release), storetest.WithClock(clock.Now))
}

// status GETs the runs with secret and returns the status.
func statusWith(t *testing.T, h *apitest.Harness, secret string) int {
	t.Helper()
	status, _ := raw(t, h, "GET", "/api/v1/runs", "", "Authorization", "Bearer "+secret)
	return status
}

func TestAdminTokensCreateListAndShowNoSecret(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		created, err := h.Client.CreateAdminToken(ctx, api.CreateAdminTokenRequest{Name: "grafana", Role: api.RoleReadOnly, TTL: "720h"})
		if err != nil {
			t.Fatal(err)
		}
		tk := created.Token
		if !strings.HasPrefix(created.Secret, store.AdminTokenPrefix) || !strings.HasPrefix(created.Secret, tk.Prefix) ||
			tk.Role != api.RoleReadOnly || tk.State != api.TokenActive || tk.CreatedBy != "api:tests" || tk.ExpiresAt == nil {
			t.Fatalf("created %+v", created)
		}
		if statusWith(t, h, created.Secret) != http.StatusOK {
			t.Fatal("the new read-only token does not read")
		}
		list, err := h.Client.AdminTokens(ctx)
		if err != nil || len(list) != 2 || list[0].ID != tk.ID || list[1].Name != "tests" || list[1].Role != api.RoleAdmin {
			t.Fatalf("list %+v %v", list, err)
		}
		// No secret and no hash in a listing.
		status, body := raw(t, h, "GET", "/api/v1/admin-tokens", "")
		for _, leak := range []string{created.Secret, store.HashToken(created.Secret), h.Token, store.HashToken(h.Token), "hash", "secret"} {
			if status != 200 || strings.Contains(string(body), leak) {
				t.Fatalf("the listing shows %q: %s", leak, body)
			}
		}
		for body, want := range map[string]string{
			`{"role":"admin"}`:                             "name is required",
			`{"name":"x"}`:                                 "role",
			`{"name":"x","role":"owner"}`:                  "role",
			`{"name":"configured","role":"admin"}`:         "admin_token",
			`{"name":"x","role":"admin","ttl":"forever"}`:  "ttl",
			`{"name":"` + long(200) + `","role":"admin"}`:  "name",
			`{"name":"x","role":"admin","scopes":["all"]}`: `unknown field "scopes"`,
		} {
			wantError(t, h, 400, kiln.CodeInvalid, "POST", "/api/v1/admin-tokens", body, want)
		}
		wantError(t, h, 409, kiln.CodeConflict, "POST", "/api/v1/admin-tokens", `{"name":"grafana","role":"admin"}`, "grafana", "rotate")
		if list, _ := h.Client.AdminTokens(ctx); len(list) != 2 {
			t.Fatalf("refused requests created tokens: %+v", list)
		}
	})
}

// Rotation gives a token a new secret; the old one stops at once, or
// after the grace period, read from the store's clock.
func TestAdminTokenRotation(t *testing.T) {
	forEachWithClock(t, func(t *testing.T, h *apitest.Harness, clock *storetest.Clock) {
		created, err := h.Client.CreateAdminToken(ctx, api.CreateAdminTokenRequest{Name: "deploys", Role: api.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		// With a grace period both secrets work until it ends.
		rot, err := h.Client.RotateAdminToken(ctx, "deploys", api.RotateAdminTokenRequest{Grace: "1h"})
		if err != nil {
			t.Fatal(err)
		}
		if rot.Token.Name != "deploys" || rot.Token.Role != api.RoleAdmin || rot.Token.ID == created.Token.ID || rot.Secret == created.Secret ||
			rot.Replaced.ID != created.Token.ID || rot.Replaced.State != api.AdminTokenRotated || rot.Replaced.ReplacedBy != rot.Token.ID ||
			rot.Replaced.RevokedAt == nil || !rot.Replaced.RevokedAt.Equal(clock.Now().Add(time.Hour)) {
			t.Fatalf("rotated %+v", rot)
		}
		clock.Advance(59 * time.Minute)
		if statusWith(t, h, created.Secret) != 200 || statusWith(t, h, rot.Secret) != 200 {
			t.Fatal("a secret stopped working during the grace period")
		}
		clock.Advance(time.Minute)
		if statusWith(t, h, created.Secret) != http.StatusUnauthorized {
			t.Fatal("the old secret works after the grace period")
		}
		if statusWith(t, h, rot.Secret) != 200 {
			t.Fatal("the new secret does not work")
		}
		list, _ := h.Client.AdminTokens(ctx)
		for _, tk := range list {
			if tk.ID == created.Token.ID && tk.State != api.TokenRevoked {
				t.Fatalf("after the grace the old token is %s", tk.State)
			}
		}
		// Without one the old secret stops at once.
		again, err := h.Client.RotateAdminToken(ctx, rot.Token.ID, api.RotateAdminTokenRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if statusWith(t, h, rot.Secret) != http.StatusUnauthorized || statusWith(t, h, again.Secret) != 200 {
			t.Fatal("rotation without grace")
		}
		if again.Replaced.State != api.TokenRevoked {
			t.Fatalf("replaced %+v", again.Replaced)
		}
		wantError(t, h, 409, kiln.CodeConflict, "POST", "/api/v1/admin-tokens/"+rot.Token.ID+"/rotate", "", "already rotated")
		wantError(t, h, 400, kiln.CodeInvalid, "POST", "/api/v1/admin-tokens/deploys/rotate", `{"grace":"-1h"}`, "grace")
		wantError(t, h, 400, kiln.CodeInvalid, "POST", "/api/v1/admin-tokens/deploys/rotate", `{"grace":"9999h"}`, "720h")
		wantError(t, h, 404, kiln.CodeNotFound, "POST", "/api/v1/admin-tokens/nobody/rotate", "", "no admin token")
	})
}

// revoke takes an id, a name or a unique prefix, for admin and agent
// tokens alike; an ambiguous prefix lists the candidates.
func TestRevokeByIDNameOrPrefix(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		var made []api.CreatedAdminToken
		for _, name := range []string{"one", "two", "three"} {
			c, err := h.Client.CreateAdminToken(ctx, api.CreateAdminTokenRequest{Name: name, Role: api.RoleReadOnly})
			if err != nil {
				t.Fatal(err)
			}
			made = append(made, c)
		}
		byID, err := h.Client.RevokeAdminToken(ctx, made[0].Token.ID)
		if err != nil || byID.ID != made[0].Token.ID || byID.State != api.TokenRevoked {
			t.Fatalf("by id: %+v %v", byID, err)
		}
		byName, err := h.Client.RevokeAdminToken(ctx, "two")
		if err != nil || byName.ID != made[1].Token.ID || byName.State != api.TokenRevoked {
			t.Fatalf("by name: %+v %v", byName, err)
		}
		byPrefix, err := h.Client.RevokeAdminToken(ctx, made[2].Token.Prefix)
		if err != nil || byPrefix.ID != made[2].Token.ID {
			t.Fatalf("by prefix: %+v %v", byPrefix, err)
		}
		for _, m := range made {
			if statusWith(t, h, m.Secret) != http.StatusUnauthorized {
				t.Fatalf("%s still works", m.Token.Name)
			}
		}
		// Ids made together share their first characters.
		a, _ := h.Client.CreateAdminToken(ctx, api.CreateAdminTokenRequest{Name: "a", Role: api.RoleReadOnly})
		b, _ := h.Client.CreateAdminToken(ctx, api.CreateAdminTokenRequest{Name: "b", Role: api.RoleReadOnly})
		_, err = h.Client.RevokeAdminToken(ctx, a.Token.ID[:6])
		wantCode(t, err, kiln.CodeInvalid)
		if msg := kiln.ErrorMessage(err); !strings.Contains(msg, a.Token.ID) || !strings.Contains(msg, b.Token.ID) || !strings.Contains(msg, "matches") {
			t.Fatalf("ambiguous prefix: %q", msg)
		}
		if statusWith(t, h, a.Secret) != 200 || statusWith(t, h, b.Secret) != 200 {
			t.Fatal("an ambiguous revoke revoked something")
		}
		// The last admin token stays.
		wantError(t, h, 409, kiln.CodeConflict, "DELETE", "/api/v1/admin-tokens/tests", "", "last admin token", "rotate")

		// Agent tokens alike.
		g1, _ := h.Client.CreateToken(ctx, api.CreateTokenRequest{Name: "gpu"})
		g2, _ := h.Client.CreateToken(ctx, api.CreateTokenRequest{Name: "gpu"})
		solo, _ := h.Client.CreateToken(ctx, api.CreateTokenRequest{Name: "solo"})
		_, err = h.Client.RevokeAgentToken(ctx, "gpu")
		wantCode(t, err, kiln.CodeInvalid)
		if msg := kiln.ErrorMessage(err); !strings.Contains(msg, g1.Token.ID) || !strings.Contains(msg, g2.Token.ID) {
			t.Fatalf("ambiguous name: %q", msg)
		}
		if got, err := h.Client.RevokeAgentToken(ctx, "solo"); err != nil || got.ID != solo.Token.ID || got.State != api.TokenRevoked {
			t.Fatalf("agent token by name: %+v %v", got, err)
		}
		if got, err := h.Client.RevokeAgentToken(ctx, g1.Token.Prefix); err != nil || got.ID != g1.Token.ID {
			t.Fatalf("agent token by prefix: %+v %v", got, err)
		}
		if _, err := h.DB.Auth().AuthenticateAgent(ctx, g1.Secret); kiln.ErrorCode(err) != kiln.CodeUnauthorized {
			t.Fatalf("a revoked agent token authenticates: %v", err)
		}
		if got, err := h.Client.RevokeAgentToken(ctx, "gpu"); err != nil || got.ID != g2.Token.ID {
			t.Fatalf("the name once its twin is revoked: %+v %v", got, err)
		}
	})
}
