package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestAdminTokenRolesAndNames(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		ro, secret, err := a.AddAdminToken(ctx, store.AdminTokenSpec{Name: "grafana", Role: store.RoleReadOnly, CreatedBy: "api:ops"})
		if err != nil || ro.Role != store.RoleReadOnly || ro.CreatedBy != "api:ops" {
			t.Fatalf("create read-only: %+v %v", ro, err)
		}
		// Only the hash is kept.
		var leaked int
		if err := db.SQL().QueryRow("SELECT COUNT(*) FROM admin_tokens WHERE hash = '" + secret + "' OR prefix = '" + secret + "'").Scan(&leaked); err != nil || leaked != 0 {
			t.Fatalf("the secret is stored: %d %v", leaked, err)
		}
		got, err := a.AuthenticateAdmin(ctx, secret)
		if err != nil || got.ID != ro.ID || got.Role != store.RoleReadOnly {
			t.Fatalf("authenticate: %+v %v", got, err)
		}
		admin, _, _ := a.CreateAdminToken(ctx, "ops", time.Time{})
		if admin.Role != store.RoleAdmin {
			t.Fatalf("CreateAdminToken role %q", admin.Role)
		}
		if _, _, err := a.AddAdminToken(ctx, store.AdminTokenSpec{Name: "x", Role: "owner"}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("unknown role: %v", err)
		}
		// A name in use is taken; once its token is revoked, or has
		// expired, it is free again.
		if _, _, err := a.AddAdminToken(ctx, store.AdminTokenSpec{Name: "grafana", Role: store.RoleAdmin}); !errors.Is(err, store.ErrConflict) ||
			!strings.Contains(kiln.ErrorMessage(err), ro.ID) {
			t.Fatalf("duplicate name: %v", err)
		}
		if _, err := a.RevokeAdminToken(ctx, ro.ID); err != nil {
			t.Fatal(err)
		}
		short, _, err := a.AddAdminToken(ctx, store.AdminTokenSpec{Name: "grafana", Role: store.RoleReadOnly, ExpiresAt: clock.Now().Add(time.Hour)})
		if err != nil {
			t.Fatalf("name of a revoked token: %v", err)
		}
		clock.Advance(2 * time.Hour)
		if _, _, err := a.AddAdminToken(ctx, store.AdminTokenSpec{Name: "grafana", Role: store.RoleReadOnly}); err != nil {
			t.Fatalf("name of an expired token %s: %v", short.ID, err)
		}
	})
}

func TestRotateAdminToken(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		old, oldSecret, _ := a.AddAdminToken(ctx, store.AdminTokenSpec{Name: "ci", Role: store.RoleReadOnly, ExpiresAt: clock.Now().Add(48 * time.Hour)})
		clock.Advance(time.Hour)

		// Without grace the old secret stops working at once.
		rot, err := a.RotateAdminToken(ctx, old.ID, 0, "api:ops")
		if err != nil {
			t.Fatal(err)
		}
		nw := rot.Token
		if nw.ID == old.ID || nw.Name != "ci" || nw.Role != store.RoleReadOnly || rot.Secret == oldSecret || nw.CreatedBy != "api:ops" ||
			!nw.ExpiresAt.Equal(clock.Now().Add(48*time.Hour)) {
			t.Fatalf("new token %+v", nw)
		}
		if rot.Old.ReplacedBy != nw.ID || !rot.Old.RevokedAt.Equal(clock.Now()) {
			t.Fatalf("old token %+v", rot.Old)
		}
		if _, err := a.AuthenticateAdmin(ctx, oldSecret); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("old secret after a rotation without grace: %v", err)
		}
		if got, err := a.AuthenticateAdmin(ctx, rot.Secret); err != nil || got.ID != nw.ID {
			t.Fatalf("new secret: %+v %v", got, err)
		}
		if _, err := a.RotateAdminToken(ctx, old.ID, 0, ""); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("rotating a rotated token: %v", err)
		}

		// With grace both work until the grace ends; then only the new one.
		rot2, err := a.RotateAdminToken(ctx, nw.ID, time.Hour, "api:ops")
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour - time.Millisecond)
		for _, s := range []string{rot.Secret, rot2.Secret} {
			if _, err := a.AuthenticateAdmin(ctx, s); err != nil {
				t.Fatalf("during the grace: %v", err)
			}
		}
		// During the grace the name designates the new token.
		if got, err := a.FindAdminToken(ctx, "ci"); err != nil || got.ID != rot2.Token.ID {
			t.Fatalf("find by name during the grace: %+v %v", got, err)
		}
		clock.Advance(time.Millisecond)
		if _, err := a.AuthenticateAdmin(ctx, rot.Secret); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("after the grace: %v", err)
		}
		if _, err := a.AuthenticateAdmin(ctx, rot2.Secret); err != nil {
			t.Fatalf("the successor after the grace: %v", err)
		}

		// Revoking a token ends the grace of the ones it replaced.
		rot3, err := a.RotateAdminToken(ctx, rot2.Token.ID, 24*time.Hour, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.CreateAdminToken(ctx, "ops", time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.RevokeAdminToken(ctx, rot3.Token.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AuthenticateAdmin(ctx, rot2.Secret); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("a predecessor in its grace after its successor was revoked: %v", err)
		}
		if _, err := a.RotateAdminToken(ctx, rot3.Token.ID, 0, ""); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("rotating a revoked token: %v", err)
		}
	})
}

func TestLastAdminTokenCannotBeRevoked(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		ops, _, _ := a.CreateAdminToken(ctx, "ops", time.Time{})
		ro, _, _ := a.AddAdminToken(ctx, store.AdminTokenSpec{Name: "ro", Role: store.RoleReadOnly})
		_, err := a.RevokeAdminToken(ctx, ops.ID)
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(kiln.ErrorMessage(err), "last admin token") {
			t.Fatalf("revoking the last admin token: %v", err)
		}
		if _, err := a.RevokeAdminToken(ctx, ro.ID); err != nil {
			t.Fatalf("a read-only token: %v", err)
		}
		// Rotating it is the way to replace its secret.
		if _, err := a.RotateAdminToken(ctx, ops.ID, 0, ""); err != nil {
			t.Fatal(err)
		}
	})
}

// Changing admin_token revokes the token the previous value made.
func TestEnsureAdminTokenRevokesThePreviousConfiguredOne(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		first, revoked, err := a.EnsureAdminToken(ctx, store.ConfiguredAdminToken, "first-configured-secret")
		if err != nil || len(revoked) != 0 || first.Name != store.ConfiguredAdminToken || first.Role != store.RoleAdmin {
			t.Fatalf("first: %+v %v %v", first, revoked, err)
		}
		// Listings show little of a secret the operator chose.
		if first.Prefix != "firs" {
			t.Fatalf("display prefix of a configured secret: %q", first.Prefix)
		}
		again, revoked, err := a.EnsureAdminToken(ctx, store.ConfiguredAdminToken, "first-configured-secret")
		if err != nil || again.ID != first.ID || len(revoked) != 0 {
			t.Fatalf("same secret again: %+v %v %v", again, revoked, err)
		}
		second, revoked, err := a.EnsureAdminToken(ctx, store.ConfiguredAdminToken, "second-configured-secret")
		if err != nil || second.ID == first.ID || len(revoked) != 1 || revoked[0].ID != first.ID {
			t.Fatalf("changed secret: %+v %+v %v", second, revoked, err)
		}
		if _, err := a.AuthenticateAdmin(ctx, "first-configured-secret"); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("the previous configured token still works: %v", err)
		}
		if _, _, err := a.EnsureAdminToken(ctx, store.ConfiguredAdminToken, "first-configured-secret"); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("going back to a revoked secret: %v", err)
		}
		// The configured token changes with the setting, not by rotation.
		if _, err := a.RotateAdminToken(ctx, second.ID, 0, ""); !errors.Is(err, store.ErrConflict) ||
			!strings.Contains(kiln.ErrorMessage(err), "admin_token") {
			t.Fatalf("rotating the configured token: %v", err)
		}
		// The last admin token, configured, is changed with the setting.
		if _, err := a.RevokeAdminToken(ctx, second.ID); !errors.Is(err, store.ErrConflict) ||
			!strings.Contains(kiln.ErrorMessage(err), "change the admin_token setting") {
			t.Fatalf("revoking the configured token, the last admin one: %v", err)
		}
		// A read-only token's secret is no admin_token.
		_, roSecret, _ := a.AddAdminToken(ctx, store.AdminTokenSpec{Name: "ro", Role: store.RoleReadOnly})
		if _, _, err := a.EnsureAdminToken(ctx, store.ConfiguredAdminToken, roSecret); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a read-only secret as admin_token: %v", err)
		}
		if _, err := a.AuthenticateAdmin(ctx, "second-configured-secret"); err != nil {
			t.Fatalf("a refused admin_token revoked the configured one: %v", err)
		}
	})
}

func TestFindTokensByIDNameOrPrefix(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		b1, _, _ := a.CreateAgentToken(ctx, store.AgentTokenSpec{Name: "builders"})
		b2, _, _ := a.CreateAgentToken(ctx, store.AgentTokenSpec{Name: "builders"})
		gpu, _, _ := a.CreateAgentToken(ctx, store.AgentTokenSpec{Name: "gpu"})
		for ref, want := range map[string]string{
			b1.ID: b1.ID, gpu.ID[:30]: gpu.ID, "gpu": gpu.ID, gpu.Prefix: gpu.ID, gpu.Prefix[:10]: gpu.ID,
		} {
			got, err := a.FindAgentToken(ctx, ref)
			if err != nil || got.ID != want {
				t.Fatalf("find %q: %+v %v", ref, got, err)
			}
		}
		// A name two tokens share, and a prefix every id shares, list the
		// candidates.
		for _, ref := range []string{"builders", b1.ID[:8]} {
			_, err := a.FindAgentToken(ctx, ref)
			msg := kiln.ErrorMessage(err)
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(msg, b1.ID) || !strings.Contains(msg, b2.ID) || !strings.Contains(msg, "give its id") {
				t.Fatalf("ambiguous %q: %v", ref, err)
			}
		}
		for _, ref := range []string{"nobody", "kat", "", "kat_zzzzzzzzzz"} {
			if _, err := a.FindAgentToken(ctx, ref); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("unknown %q: %v", ref, err)
			}
		}
		// Names and prefixes name tokens in use; an id names any.
		if err := a.RevokeAgentToken(ctx, b1.ID); err != nil {
			t.Fatal(err)
		}
		if got, err := a.FindAgentToken(ctx, "builders"); err != nil || got.ID != b2.ID {
			t.Fatalf("name after revoking its twin: %+v %v", got, err)
		}
		if _, err := a.FindAgentToken(ctx, b1.Prefix); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("prefix of a revoked token: %v", err)
		}
		if got, err := a.FindAgentToken(ctx, b1.ID); err != nil || got.RevokedAt.IsZero() {
			t.Fatalf("id of a revoked token: %+v %v", got, err)
		}

		// Admin tokens alike, by their own table.
		ops, _, _ := a.CreateAdminToken(ctx, "ops", time.Time{})
		if got, err := a.FindAdminToken(ctx, ops.Prefix); err != nil || got.ID != ops.ID {
			t.Fatalf("admin by prefix: %+v %v", got, err)
		}
		if _, err := a.FindAdminToken(ctx, "gpu"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an agent token's name found an admin token: %v", err)
		}
	})
}
