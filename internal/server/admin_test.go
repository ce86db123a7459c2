package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

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

// B243: a server that is not where the CLI looks by default says at start
// how to tell the CLI (export KILN_SERVER=…); one at the default says nothing.
func TestStartMessageTellsTheCLIWhereTheServerIs(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:4000": "",
		"0.0.0.0:4000":   "",
		"[::]:5000":      "export KILN_SERVER=http://127.0.0.1:5000\n",
		"10.0.0.7:4000":  "export KILN_SERVER=http://10.0.0.7:4000\n",
	} {
		got := cliHint(addr)
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("cliHint(%q) = %q, want %q", addr, got, want)
		}
	}
	var out lockedLog
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.LocalAgents = t.TempDir(), "127.0.0.1:0", 0
	ctx, cancel := context.WithCancel(context.Background())
	var url string
	err := Run(ctx, cfg, Options{Out: &out, Logger: slog.New(slog.DiscardHandler), Ready: func(s *Server) { url = s.URL; cancel() }})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "export KILN_SERVER="+url+"\n") || !strings.Contains(out.String(), "admin token") {
		t.Errorf("start message:\n%s", out.String())
	}
}

// B244: the server's JSON log writes durations as text, as its text log does.
func TestJSONLogWritesDurationsAsText(t *testing.T) {
	var buf bytes.Buffer
	newLogger(&buf, LogConfig{Level: "info", Format: "json"}).Info("x", "retry_in", 7350*time.Millisecond)
	if !strings.Contains(buf.String(), `"retry_in":"7.35s"`) {
		t.Fatalf("log line: %s", buf.String())
	}
}
