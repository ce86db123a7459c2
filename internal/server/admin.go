package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store"
)

// bootstrapAdmin makes sure an operator can use the API: a token fixed by
// the configuration (KILN_ADMIN_TOKEN) is created if missing, and the one an
// earlier value of the setting made is revoked; otherwise, on
// the first start (no admin token yet), one is generated and printed once —
// it is stored only as a hash and cannot be shown again. It returns the
// token's secret when this start knows it.
func bootstrapAdmin(ctx context.Context, db *store.DB, cfg Config, out io.Writer) (string, error) {
	if cfg.AdminToken != "" {
		_, revoked, err := db.Auth().EnsureAdminToken(ctx, store.ConfiguredAdminToken, cfg.AdminToken)
		if err != nil {
			return "", fmt.Errorf("admin_token: %w", err)
		}
		for _, tk := range revoked {
			fmt.Fprintf(out, "kiln: admin_token changed; the admin token of its previous value (%s, %s…) is revoked\n", tk.ID, tk.Prefix)
		}
		return cfg.AdminToken, nil
	}
	tokens, err := db.Auth().ListAdminTokens(ctx)
	if err != nil {
		return "", err
	}
	if len(tokens) > 0 {
		return "", nil
	}
	_, secret, err := db.Auth().CreateAdminToken(ctx, "first", time.Time{})
	if err != nil {
		return "", err
	}
	fmt.Fprintf(out, "\nkiln: this is the first start; your admin token is shown once, keep it:\n\n    %s\n\n"+
		"use it as KILN_TOKEN for the kiln CLI, or as 'Authorization: Bearer …' for the API.\n\n", secret)
	return secret, nil
}

// cliHint is the line that tells the CLI where this server is, when it is
// not where the CLI looks by default; "" when it is. A listener on every
// address is reached on the loopback one from this host.
func cliHint(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port)
	if url == api.DefaultServer {
		return ""
	}
	return "kiln: this server is not where the kiln CLI looks by default; tell it with\n\n    export KILN_SERVER=" + url + "\n\n"
}
