package server

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// Changing admin_token between two starts revokes the token of the
// previous value: an operator who replaces a leaked token is rid of it.
func TestChangingAdminTokenRevokesThePreviousOne(t *testing.T) {
	ctx := context.Background()
	db := storetest.New(t)
	var out bytes.Buffer
	cfg := Config{AdminToken: "first-value-of-the-setting"}
	if got, err := bootstrapAdmin(ctx, db, cfg, &out); err != nil || got != cfg.AdminToken {
		t.Fatalf("first start: %q %v", got, err)
	}
	cfg.AdminToken = "second-value-of-the-setting"
	if _, err := bootstrapAdmin(ctx, db, cfg, &out); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Auth().AuthenticateAdmin(ctx, "first-value-of-the-setting"); err == nil {
		t.Fatal("the previous admin_token still works")
	}
	if tk, err := db.Auth().AuthenticateAdmin(ctx, "second-value-of-the-setting"); err != nil || tk.Name != store.ConfiguredAdminToken {
		t.Fatalf("the new admin_token: %+v %v", tk, err)
	}
	if !strings.Contains(out.String(), "admin_token changed") || strings.Contains(out.String(), "first-value-of-the-setting") {
		t.Fatalf("start-up output: %q", out.String())
	}
	// Going back to the revoked value is refused with a reason.
	cfg.AdminToken = "first-value-of-the-setting"
	if _, err := bootstrapAdmin(ctx, db, cfg, &out); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("a revoked admin_token: %v", err)
	}
}
