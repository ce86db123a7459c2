package api

import (
	"context"
	"net/http"

	"github.com/kilnci/kiln"
)

// ClaimRequest redeems an event scaler's claim code (docs/scalers.md):
// `kiln agent --claim CODE` sends it.
type ClaimRequest struct {
	Code string `json:"code"`
}

// Claimed is what a claim code is exchanged for: the agent's id, labels
// and its ephemeral single-use token (shown once).
type Claimed struct {
	AgentID         string      `json:"agent_id"`
	Token           string      `json:"token"`
	Labels          kiln.Labels `json:"labels"`
	MandatoryLabels kiln.Labels `json:"mandatory_labels,omitempty"`
	ServerURL       string      `json:"server_url,omitempty"`
	MaxJobs         int         `json:"max_jobs"`
}

// claimAgent is public: the claim code is the credential, 256 random bits
// of which only the hash is stored, redeemed once (B149). Every refusal
// is the same 401, whichever check failed.
func (s *server) claimAgent(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req ClaimRequest
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	got, err := s.DB.Scalers().RedeemClaim(r.Context(), req.Code)
	if err != nil {
		return err
	}
	s.cfg.Logger.Info("claim code redeemed", "agent_id", got.AgentID)
	writeJSON(w, http.StatusOK, Claimed{AgentID: got.AgentID, Token: got.Token, Labels: orEmptyLabels(got.Labels),
		MandatoryLabels: got.Mandatory, ServerURL: got.ServerURL, MaxJobs: 1})
	return nil
}

// ClaimAgent redeems a claim code; the client needs no token.
func (c *Client) ClaimAgent(ctx context.Context, code string) (Claimed, error) {
	var out Claimed
	_, err := c.do(ctx, "POST", "/api/v1/agents/claim", nil, ClaimRequest{Code: code}, &out)
	return out, err
}
