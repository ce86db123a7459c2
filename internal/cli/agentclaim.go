package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent"
	"github.com/kilnci/kiln/internal/api"
)

// claimRetryFor bounds how long `kiln agent --claim` keeps trying a server
// it cannot reach (a machine just booted may not have its network yet).
const claimRetryFor = time.Minute

// redeemClaim exchanges an event scaler's claim code for the agent's id,
// labels and single-use token (B149): the agent then runs as the spawn the
// code was made for, taking one job. A refused code is final.
func redeemClaim(ctx context.Context, cfg *agent.Config, code string) error {
	base, err := httpBase(cfg.Server)
	if err != nil {
		return usageErrorf("%v", err)
	}
	c, err := api.NewClient(base, "")
	if err != nil {
		return usageErrorf("%v", err)
	}
	deadline := time.Now().Add(claimRetryFor)
	wait := 500 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, err := c.ClaimAgent(cctx, strings.TrimSpace(code))
		cancel()
		if err == nil {
			cfg.ID, cfg.Token, cfg.TokenFile, cfg.Labels, cfg.MaxJobs = got.AgentID, got.Token, "", got.Labels, 1
			cfg.Logger.Info("claim code redeemed", "agent_id", got.AgentID, "labels", strings.Join(got.Labels, ","))
			return nil
		}
		if kiln.ErrorCode(err) != kiln.CodeUnavailable || time.Now().Add(wait).After(deadline) {
			return &exitError{code: ExitFailure, err: fmt.Errorf("agent: redeeming the claim code: %s", kiln.ErrorMessage(err))}
		}
		cfg.Logger.Warn("the server cannot be reached to redeem the claim code; retrying", "err", kiln.ErrorMessage(err), "in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// httpBase turns the agent's --server (ws(s)://host/ws or http(s)://host)
// into the API's base URL.
func httpBase(server string) (string, error) {
	ws, err := agent.ServerURL(server)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(ws)
	if err != nil {
		return "", err
	}
	u.Scheme = map[string]string{"ws": "http", "wss": "https"}[u.Scheme]
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/ws")
	u.RawPath = ""
	return u.String(), nil
}
