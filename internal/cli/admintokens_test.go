package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store"
)

// Proves B60 (docs/behaviours.md).
func TestAdminTokensCreateListRotateRevoke(t *testing.T) {
	o := newOp(t)
	code, out, errOut := o.kiln(t, "admin-tokens", "create", "grafana", "--role", "read-only")
	if code != ExitOK {
		t.Fatalf("create: %d %s", code, errOut)
	}
	secret := strings.TrimSuffix(out, "\n")
	if !strings.HasPrefix(secret, store.AdminTokenPrefix) || strings.ContainsAny(secret, " \n\t") || strings.Contains(errOut, secret) {
		t.Fatalf("stdout is not just the secret: %q (stderr %q)", out, errOut)
	}
	contains(t, errOut, "created read-only token", `"grafana"`, "shown only once")

	// The read-only token reads, and is told why it may not do more.
	ro := map[string]string{EnvServer: o.URL, EnvToken: secret}
	if code, out, errOut := runCLI(t, ro, "runs", "list"); code != ExitOK || !strings.Contains(out, "RUN") {
		t.Fatalf("runs list with a read-only token: %d %s %s", code, out, errOut)
	}
	code, _, errOut = runCLI(t, ro, "admin-tokens", "create", "x", "--role", "admin")
	if code != ExitFailure || !strings.Contains(errOut, "read-only role") || !strings.Contains(errOut, "needs an admin token") {
		t.Fatalf("create with a read-only token: %d %s", code, errOut)
	}

	list := o.ok(t, "admin-tokens", "list")
	contains(t, list, "ROLE", "grafana", "read-only", "tests", "admin", "api:tests")
	if strings.Contains(list, secret) {
		t.Fatal("list shows the secret")
	}

	// Rotating with a grace period prints the new secret; both work
	// meanwhile.
	code, out, errOut = o.kiln(t, "admin-tokens", "rotate", "grafana", "--grace", "1h")
	if code != ExitOK {
		t.Fatalf("rotate: %d %s", code, errOut)
	}
	rotated := strings.TrimSuffix(out, "\n")
	contains(t, errOut, "rotated read-only token", "works until", "shown only once")
	for _, s := range []string{secret, rotated} {
		if _, err := o.DB.Auth().AuthenticateAdmin(t.Context(), s); err != nil {
			t.Fatalf("during the grace: %v", err)
		}
	}
	contains(t, o.ok(t, "admin-tokens", "list"), "rotated (revoked in")
	var tks []api.AdminToken
	if err := json.Unmarshal([]byte(o.ok(t, "admin-tokens", "list", "--json")), &tks); err != nil || len(tks) != 3 {
		t.Fatalf("list --json: %v %d", err, len(tks))
	}

	// Revoking by name revokes the current token and ends the grace of the
	// one it replaced.
	contains(t, o.ok(t, "admin-tokens", "revoke", "grafana"), "revoked read-only token", `"grafana"`)
	for _, s := range []string{secret, rotated} {
		if _, err := o.DB.Auth().AuthenticateAdmin(t.Context(), s); err == nil {
			t.Fatal("a revoked secret still works")
		}
	}

	o.fails(t, ExitUsage, "--role is required", "admin-tokens", "create", "ci")
	o.fails(t, ExitFailure, "must be admin or read-only", "admin-tokens", "create", "ci", "--role", "owner")
	o.fails(t, ExitFailure, "last admin token", "admin-tokens", "revoke", "tests")
	o.fails(t, ExitFailure, "no admin token", "admin-tokens", "rotate", "nobody")
	o.ok(t, "admin-tokens", "create", "a", "--role", "read-only")
	o.ok(t, "admin-tokens", "create", "b", "--role", "read-only")
	if err := json.Unmarshal([]byte(o.ok(t, "admin-tokens", "list", "--json")), &tks); err != nil {
		t.Fatal(err)
	}
	o.fails(t, ExitFailure, "give its id", "admin-tokens", "revoke", tks[0].ID[:6])
}
