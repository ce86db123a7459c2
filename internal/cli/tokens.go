package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/api"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newTokensCmd(e *env) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Create, list and revoke agent tokens",
		Long:  "tokens manages the tokens agents authenticate with (API tokens are under kiln admin-tokens). kiln keeps only their hashes: a secret is shown once, when it is created.",
		Args:  cobra.NoArgs,
	}
	addClientFlags(cmd, &cf)
	cmd.AddCommand(newTokensCreateCmd(e, &cf), newTokensListCmd(e, &cf), newTokensRevokeCmd(e, &cf))
	return cmd
}

func newTokensCreateCmd(e *env, cf *clientFlags) *cobra.Command {
	var req api.CreateTokenRequest
	var ttl time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create an agent token and print its secret",
		Long: `create makes an agent token and prints only its secret on stdout (the details go to
stderr), so it can be captured: TOKEN=$(kiln tokens create --label linux).

--label scopes the token: agents using it may only offer those labels. --mandatory labels
are carried as taints by every agent using it: such an agent only takes jobs that ask
for all of them. A mandatory label must be among the token's labels when it is scoped.`,
		Example: "  kiln tokens create --name ci-box --label linux --label amd64\n" +
			"  kiln tokens create --label linux --label gpu --mandatory gpu --ttl 720h\n" +
			"  kiln tokens create --single-use --ttl 10m",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl < 0 {
				return usageErrorf("--ttl must be positive")
			}
			if ttl > 0 {
				req.TTL = ttl.String()
			}
			req.Labels, req.Mandatory = splitLabels(req.Labels), splitLabels(req.Mandatory)
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			created, err := c.CreateToken(cmd.Context(), req)
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, created)
			}
			tk := created.Token
			scope := "any labels"
			if tk.Labels != nil {
				scope = "labels " + labels(tk.Labels)
			}
			fmt.Fprintf(e.stderr, "created agent token %s (%s…) for %s", tk.ID, tk.Prefix, scope)
			if len(tk.Mandatory) > 0 {
				fmt.Fprintf(e.stderr, ", mandatory %s", labels(tk.Mandatory))
			}
			if tk.ExpiresAt != nil {
				fmt.Fprintf(e.stderr, ", expires %s", tk.ExpiresAt.Local().Format(time.RFC3339))
			}
			if tk.SingleUse {
				fmt.Fprint(e.stderr, ", single use")
			}
			if tk.AgentID != "" {
				fmt.Fprintf(e.stderr, ", for agent id %s only", tk.AgentID)
			}
			fmt.Fprintln(e.stderr, "\n"+secretNote(e, "the secret"))
			fmt.Fprintln(e.stdout, created.Secret)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Name, "name", "", "a name to recognise the token by")
	fs.StringSliceVar(&req.Labels, "label", nil, "scope the token to these labels (repeat, or comma-separate)")
	fs.StringSliceVar(&req.Mandatory, "mandatory", nil, "labels agents using the token carry as mandatory")
	fs.DurationVar(&ttl, "ttl", 0, "how long the token is valid (e.g. 1h, 720h; default: until revoked)")
	fs.BoolVar(&req.SingleUse, "single-use", false, "the token is consumed by its first use")
	fs.StringVar(&req.AgentID, "agent-id", "", "bind the token to this agent id: it registers no other")
	fs.BoolVar(&asJSON, "json", false, "print the token and its secret as JSON")
	// kiln agent takes --labels; accept the plural here too rather than
	// fail a newcomer over one letter.
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "labels" {
			name = "label"
		}
		return pflag.NormalizedName(name)
	})
	return cmd
}

// splitLabels keeps nil as nil (an unscoped token) and drops empty entries.
func splitLabels(ls []string) []string {
	if ls == nil {
		return nil
	}
	out := []string{}
	for _, l := range ls {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func newTokensListCmd(e *env, cf *clientFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List agent tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			tks, err := c.Tokens(cmd.Context())
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, tks)
			}
			tw := newTable(e.stdout)
			fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tLABELS\tMANDATORY\tSTATE\tEXPIRES\tLAST USED")
			for _, t := range tks {
				scope := "(any)"
				if t.Labels != nil {
					scope = labels(t.Labels)
				}
				if t.SingleUse {
					scope += " single-use"
				}
				if t.AgentID != "" {
					scope += " id=" + t.AgentID
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, or(t.Name), t.Prefix, scope, labels(t.Mandatory),
					t.State, ago(t.ExpiresAt), ago(t.LastUsedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newTokensRevokeCmd(e *env, cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID|NAME|PREFIX",
		Short: "Revoke an agent token and disconnect the agents using it",
		Long: `revoke revokes the agent token named by its id, its name, or the first characters (at least
4) of its id or of its secret's prefix, as kiln tokens list shows them; a name or prefix
that matches several tokens is refused with the list of them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			tk, err := c.RevokeAgentToken(cmd.Context(), args[0])
			if err != nil {
				return apiError(err)
			}
			name := ""
			if tk.Name != "" {
				name = fmt.Sprintf(" %q", tk.Name)
			}
			fmt.Fprintf(e.stdout, "revoked agent token %s%s (%s…); agents using it were disconnected\n", tk.ID, name, tk.Prefix)
			return nil
		},
	}
}
