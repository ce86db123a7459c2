package api

import (
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// AgentToken is an agent token as listings show it: never its secret.
type AgentToken struct {
	ID     string `json:"id"`
	Prefix string `json:"prefix"` // the secret's first characters, to recognise it
	Name   string `json:"name,omitempty"`
	// Labels scopes the token: agents using it may only offer these labels.
	// null: not scoped.
	Labels    kiln.Labels `json:"labels"`
	Mandatory kiln.Labels `json:"mandatory,omitempty"`
	SingleUse bool        `json:"single_use,omitempty"`
	// AgentID, when set, binds the token to one agent id: it registers
	// that id and no other.
	AgentID    string     `json:"agent_id,omitempty"`
	State      string     `json:"state"` // active, revoked, expired, consumed
	CreatedBy  string     `json:"created_by,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	ConsumedAt *time.Time `json:"consumed_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// TokenList is every agent token, newest first.
type TokenList struct {
	Tokens []AgentToken `json:"tokens"`
}

// CreateTokenRequest describes an agent token to create.
type CreateTokenRequest struct {
	Name string `json:"name,omitempty"`
	// Labels, when given, scopes the token (agents may only offer these).
	Labels []string `json:"labels,omitempty"`
	// Mandatory labels are carried as taints by every agent using the
	// token: it only takes jobs that ask for all of them.
	Mandatory []string `json:"mandatory,omitempty"`
	// TTL is how long the token is valid, as a Go duration ("1h", "720h");
	// empty: until revoked.
	TTL       string `json:"ttl,omitempty"`
	SingleUse bool   `json:"single_use,omitempty"`
	// AgentID binds the token to one agent id (letters, digits, -_.:).
	AgentID string `json:"agent_id,omitempty"`
}

// CreatedToken is a new token and its secret, which is shown only here.
type CreatedToken struct {
	Token  AgentToken `json:"token"`
	Secret string     `json:"secret"`
}

// Token states.
const (
	TokenActive   = "active"
	TokenRevoked  = "revoked"
	TokenExpired  = "expired"
	TokenConsumed = "consumed"
)

// maxTokenTTL bounds a token's lifetime.
const maxTokenTTL = 10 * 366 * 24 * time.Hour

func tokenDTO(t store.AgentToken, now time.Time) AgentToken {
	out := AgentToken{
		ID: t.ID, Prefix: t.Prefix, Name: t.Name, Labels: t.Labels, Mandatory: t.Mandatory, SingleUse: t.SingleUse,
		AgentID: t.AgentID, CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt.UTC(), ExpiresAt: tp(t.ExpiresAt), RevokedAt: tp(t.RevokedAt),
		ConsumedAt: tp(t.ConsumedAt), LastUsedAt: tp(t.LastUsedAt), State: TokenActive,
	}
	if len(out.Mandatory) == 0 {
		out.Mandatory = nil
	}
	switch {
	case !t.RevokedAt.IsZero():
		out.State = TokenRevoked
	case !t.ConsumedAt.IsZero():
		out.State = TokenConsumed
	case !t.ExpiresAt.IsZero() && !t.ExpiresAt.After(now):
		out.State = TokenExpired
	}
	return out
}

func (s *server) listTokens(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	tks, err := s.DB.Auth().ListAgentTokens(r.Context())
	if err != nil {
		return err
	}
	now := s.cfg.Clock()
	out := TokenList{Tokens: make([]AgentToken, len(tks))}
	for i, t := range tks {
		out.Tokens[i] = tokenDTO(t, now)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) createToken(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req CreateTokenRequest
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	spec, err := req.spec(s.cfg.Clock())
	if err != nil {
		return err
	}
	spec.CreatedBy = actor(r)
	tk, secret, err := s.DB.Auth().CreateAgentToken(r.Context(), spec)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/tokens/"+tk.ID)
	writeJSON(w, http.StatusCreated, CreatedToken{Token: tokenDTO(tk, s.cfg.Clock()), Secret: secret})
	return nil
}

// spec validates the request and turns it into what the store keeps.
func (req CreateTokenRequest) spec(now time.Time) (store.AgentTokenSpec, error) {
	var spec store.AgentTokenSpec
	if len(req.Name) > 100 || strings.IndexFunc(req.Name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return spec, errorf(codeInvalid, "name must be at most 100 printable characters")
	}
	for field, ls := range map[string][]string{"labels": req.Labels, "mandatory": req.Mandatory} {
		if err := kiln.ValidateLabels(ls); err != nil {
			return spec, errorf(codeInvalid, "%s: %s", field, kiln.ErrorMessage(err))
		}
	}
	if req.Labels != nil && len(kiln.NewLabels(req.Labels...)) == 0 {
		return spec, errorf(codeInvalid, "labels is empty; give at least one label, or leave labels out for a token that is not scoped")
	}
	if req.AgentID != "" && !validAgentID(req.AgentID) {
		return spec, errorf(codeInvalid, "agent_id %.40q must be at most 128 letters, digits, '-', '_', '.' or ':'", req.AgentID)
	}
	spec.Name, spec.SingleUse, spec.Mandatory, spec.AgentID = req.Name, req.SingleUse, kiln.NewLabels(req.Mandatory...), req.AgentID
	if req.Labels != nil {
		spec.Labels = kiln.NewLabels(req.Labels...)
		for _, m := range spec.Mandatory {
			if !spec.Labels.Has(m) {
				return spec, errorf(codeInvalid, "mandatory label %q is not among the token's labels (%s); an agent could never carry it", m, spec.Labels.Key())
			}
		}
	}
	if req.TTL != "" {
		ttl, err := time.ParseDuration(req.TTL)
		if err != nil || ttl <= 0 || ttl > maxTokenTTL {
			return spec, errorf(codeInvalid, "ttl %.40q must be a positive duration like 30m, 12h or 720h, at most 10 years", req.TTL)
		}
		spec.ExpiresAt = now.Add(ttl)
	}
	return spec, nil
}

// revokeToken revokes the agent token {id} names (an id, a name or a
// prefix: store.FindAgentToken) and disconnects its agents.
func (s *server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	ref := r.PathValue("id")
	if !validRef(ref) {
		return errorf(codeNotFound, "there is no agent token %.80q", ref)
	}
	tk, err := s.DB.Auth().FindAgentToken(r.Context(), ref)
	if err != nil {
		return err
	}
	if err := s.DB.Auth().RevokeAgentToken(r.Context(), tk.ID); err != nil {
		return err
	}
	if s.Fleet != nil {
		s.Fleet.DisconnectToken(tk.ID)
	}
	if tk, err = s.DB.Auth().FindAgentToken(r.Context(), tk.ID); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, tokenDTO(tk, s.cfg.Clock()))
	return nil
}

// validAgentID is the agent protocol's rule for ids.
func validAgentID(id string) bool {
	if len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r == '-' || r == '_' || r == '.' || r == ':' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
			return false
		}
	}
	return true
}
