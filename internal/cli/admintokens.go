package cli

import (
	"fmt"
	"time"

	"github.com/kilnci/kiln/internal/api"
	"github.com/spf13/cobra"
)

func newAdminTokensCmd(e *env) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "admin-tokens",
		Short: "Create, list, revoke and rotate admin and read-only API tokens",
		Long: `admin-tokens manages the tokens of the API and the CLI (agent tokens are under kiln tokens).
An admin token may do everything; a read-only token may read runs, logs, events, the queue,
agents and /metrics, and nothing else. kiln keeps only their hashes: a secret is shown once,
when it is created or rotated.`,
		Args: cobra.NoArgs,
	}
	addClientFlags(cmd, &cf)
	cmd.AddCommand(newAdminTokensListCmd(e, &cf), newAdminTokensCreateCmd(e, &cf),
		newAdminTokensRevokeCmd(e, &cf), newAdminTokensRotateCmd(e, &cf))
	return cmd
}

func newAdminTokensListCmd(e *env, cf *clientFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List admin tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			tks, err := c.AdminTokens(cmd.Context())
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, tks)
			}
			tw := newTable(e.stdout)
			fmt.Fprintln(tw, "ID\tNAME\tROLE\tPREFIX\tSTATE\tEXPIRES\tLAST USED\tCREATED BY")
			for _, t := range tks {
				state := t.State
				if t.State == api.AdminTokenRotated {
					state += " (revoked " + ago(t.RevokedAt) + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, t.Prefix, state,
					ago(t.ExpiresAt), ago(t.LastUsedAt), or(t.CreatedBy))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newAdminTokensCreateCmd(e *env, cf *clientFlags) *cobra.Command {
	var req api.CreateAdminTokenRequest
	var ttl time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create NAME --role admin|read-only",
		Short: "Create an admin or read-only token and print its secret",
		Long: `create makes an API token and prints only its secret on stdout (the details go to stderr),
so it can be captured: TOKEN=$(kiln admin-tokens create grafana --role read-only).
The name must not be that of another token in use; --role is required.`,
		Example: "  kiln admin-tokens create grafana --role read-only\n" +
			"  kiln admin-tokens create deploy-bot --role admin --ttl 2160h",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.Role == "" {
				return usageErrorf("--role is required: admin (may do everything) or read-only (may only read)")
			}
			if ttl < 0 {
				return usageErrorf("--ttl must be positive")
			}
			if ttl > 0 {
				req.TTL = ttl.String()
			}
			req.Name = args[0]
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			created, err := c.CreateAdminToken(cmd.Context(), req)
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, created)
			}
			tk := created.Token
			fmt.Fprintf(e.stderr, "created %s token %s %q (%s…)", tk.Role, tk.ID, tk.Name, tk.Prefix)
			if tk.ExpiresAt != nil {
				fmt.Fprintf(e.stderr, ", expires %s", tk.ExpiresAt.Local().Format(time.RFC3339))
			}
			fmt.Fprintln(e.stderr, "\n"+secretNote(e, "the secret"))
			fmt.Fprintln(e.stdout, created.Secret)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Role, "role", "", "admin or read-only (required)")
	fs.DurationVar(&ttl, "ttl", 0, "how long the token is valid (e.g. 720h; default: until revoked)")
	fs.BoolVar(&asJSON, "json", false, "print the token and its secret as JSON")
	return cmd
}

func newAdminTokensRevokeCmd(e *env, cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID|NAME|PREFIX",
		Short: "Revoke an admin token at once",
		Long: `revoke revokes the admin token named by its id, its name, or the first characters (at least
4) of its id or of its secret's prefix, as kiln admin-tokens list shows them; a prefix that
matches several tokens is refused with the list of them. Tokens it replaced that are still
in their rotation grace period are revoked with it. The last admin token cannot be revoked:
rotate it instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			tk, err := c.RevokeAdminToken(cmd.Context(), args[0])
			if err != nil {
				return apiError(err)
			}
			fmt.Fprintf(e.stdout, "revoked %s token %s %q (%s…)\n", tk.Role, tk.ID, tk.Name, tk.Prefix)
			return nil
		},
	}
}

func newAdminTokensRotateCmd(e *env, cf *clientFlags) *cobra.Command {
	var grace time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rotate ID|NAME|PREFIX [--grace DURATION]",
		Short: "Give an admin token a new secret and print it",
		Long: `rotate replaces an admin token's secret: the new token has the same name, role and lifetime,
and its secret is printed on stdout (shown only once). The old secret stops working at once,
or after --grace, so whatever uses it can be given the new one first. The token of the
server's admin_token setting is rotated by changing the setting.`,
		Example: "  kiln admin-tokens rotate ci --grace 1h",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if grace < 0 {
				return usageErrorf("--grace must not be negative")
			}
			var req api.RotateAdminTokenRequest
			if grace > 0 {
				req.Grace = grace.String()
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			rot, err := c.RotateAdminToken(cmd.Context(), args[0], req)
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, rot)
			}
			old := rot.Replaced
			if old.State == api.AdminTokenRotated && old.RevokedAt != nil {
				fmt.Fprintf(e.stderr, "rotated %s token %q: the old secret (%s…) works until %s\n", rot.Token.Role, rot.Token.Name,
					old.Prefix, old.RevokedAt.Local().Format(time.RFC3339))
			} else {
				fmt.Fprintf(e.stderr, "rotated %s token %q: the old secret (%s…) is revoked\n", rot.Token.Role, rot.Token.Name, old.Prefix)
			}
			fmt.Fprintf(e.stderr, "new token %s; %s\n", rot.Token.ID, secretNote(e, "its secret"))
			fmt.Fprintln(e.stdout, rot.Secret)
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 0, "how long the old secret keeps working (e.g. 10m, 24h; at most 720h; default: revoked at once)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the new token, its secret and the replaced token as JSON")
	return cmd
}
