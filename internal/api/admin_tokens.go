package api

import (
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/kilnci/kiln/internal/store"
)

// Roles of admin tokens.
const (
	RoleAdmin    = string(store.RoleAdmin)    // everything the API does
	RoleReadOnly = string(store.RoleReadOnly) // every GET but tokens and sources; nothing else
)

// AdminTokenRotated is the state of an admin token a rotation replaced,
// during its grace period: it still works until revoked_at.
const AdminTokenRotated = "rotated"

// maxRotationGrace bounds how long a rotated token keeps working.
const maxRotationGrace = 30 * 24 * time.Hour

// AdminToken is an admin (API) token as listings show it: never its secret
// nor its hash.
type AdminToken struct {
	ID     string `json:"id"`
	Prefix string `json:"prefix"` // the secret's first characters, to recognise it
	Name   string `json:"name"`
	Role   string `json:"role"`  // admin or read-only
	State  string `json:"state"` // active, rotated (works until revoked_at), revoked, expired
	// CreatedBy is who made it: "api:<token name>", "configuration", or
	// empty for the token of the first start.
	CreatedBy string     `json:"created_by,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// RevokedAt is when the token was revoked, or, in state rotated, when
	// it will be.
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	ReplacedBy string     `json:"replaced_by,omitempty"` // the id of the token a rotation replaced it with
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// AdminTokenList is every admin token, newest first.
type AdminTokenList struct {
	Tokens []AdminToken `json:"tokens"`
}

// CreateAdminTokenRequest describes an admin token to create.
type CreateAdminTokenRequest struct {
	// Name is required and must not be that of another token in use.
	Name string `json:"name"`
	// Role is required: admin or read-only.
	Role string `json:"role"`
	// TTL is how long the token is valid, as a Go duration; empty: until
	// revoked.
	TTL string `json:"ttl,omitempty"`
}

// CreatedAdminToken is a new admin token and its secret, shown only here.
type CreatedAdminToken struct {
	Token  AdminToken `json:"token"`
	Secret string     `json:"secret"`
}

// RotateAdminTokenRequest says how long the replaced token keeps working.
type RotateAdminTokenRequest struct {
	// Grace is a Go duration ("1h"); empty or "0s": the old token is
	// revoked at once.
	Grace string `json:"grace,omitempty"`
}

// RotatedAdminToken is the token a rotation made, its secret (shown only
// here), and the token it replaces.
type RotatedAdminToken struct {
	Token    AdminToken `json:"token"`
	Secret   string     `json:"secret"`
	Replaced AdminToken `json:"replaced"`
}

func adminTokenDTO(t store.AdminToken, now time.Time) AdminToken {
	out := AdminToken{
		ID: t.ID, Prefix: t.Prefix, Name: t.Name, Role: string(t.Role), State: TokenActive, CreatedBy: t.CreatedBy,
		CreatedAt: t.CreatedAt.UTC(), ExpiresAt: tp(t.ExpiresAt), RevokedAt: tp(t.RevokedAt), ReplacedBy: t.ReplacedBy,
		LastUsedAt: tp(t.LastUsedAt),
	}
	switch {
	case !t.RevokedAt.IsZero() && !t.RevokedAt.After(now):
		out.State = TokenRevoked
	case !t.ExpiresAt.IsZero() && !t.ExpiresAt.After(now):
		out.State = TokenExpired
	case !t.RevokedAt.IsZero():
		out.State = AdminTokenRotated
	}
	return out
}

func (s *server) listAdminTokens(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	tks, err := s.DB.Auth().ListAdminTokens(r.Context())
	if err != nil {
		return err
	}
	now := s.cfg.Clock()
	out := AdminTokenList{Tokens: make([]AdminToken, len(tks))}
	for i, t := range tks {
		out.Tokens[i] = adminTokenDTO(t, now)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) createAdminToken(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req CreateAdminTokenRequest
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	spec, err := req.spec(s.cfg.Clock())
	if err != nil {
		return err
	}
	spec.CreatedBy = actor(r)
	tk, secret, err := s.DB.Auth().AddAdminToken(r.Context(), spec)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/admin-tokens/"+tk.ID)
	writeJSON(w, http.StatusCreated, CreatedAdminToken{Token: adminTokenDTO(tk, s.cfg.Clock()), Secret: secret})
	return nil
}

// spec validates the request and turns it into what the store keeps.
func (req CreateAdminTokenRequest) spec(now time.Time) (store.AdminTokenSpec, error) {
	var spec store.AdminTokenSpec
	name := strings.TrimSpace(req.Name)
	switch {
	case name == "":
		return spec, errorf(codeInvalid, "name is required: what the token is for, such as ci or grafana")
	case len(name) > 100 || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return spec, errorf(codeInvalid, "name must be at most 100 printable characters")
	case name == store.ConfiguredAdminToken:
		return spec, errorf(codeInvalid, "the name %q is kept for the token of the server's admin_token setting; choose another", name)
	}
	role := store.Role(req.Role)
	if !role.Valid() {
		return spec, errorf(codeInvalid, "role %.40q must be %s or %s", req.Role, RoleAdmin, RoleReadOnly)
	}
	spec.Name, spec.Role = name, role
	if req.TTL != "" {
		ttl, err := time.ParseDuration(req.TTL)
		if err != nil || ttl <= 0 || ttl > maxTokenTTL {
			return spec, errorf(codeInvalid, "ttl %.40q must be a positive duration like 30m, 12h or 720h, at most 10 years", req.TTL)
		}
		spec.ExpiresAt = now.Add(ttl)
	}
	return spec, nil
}

// adminTokenRef resolves the {id} of a request: an id, a name or a prefix.
func (s *server) adminTokenRef(r *http.Request) (store.AdminToken, error) {
	ref := r.PathValue("id")
	if !validRef(ref) {
		return store.AdminToken{}, errorf(codeNotFound, "there is no admin token %.80q", ref)
	}
	return s.DB.Auth().FindAdminToken(r.Context(), ref)
}

func (s *server) revokeAdminToken(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	tk, err := s.adminTokenRef(r)
	if err != nil {
		return err
	}
	if tk, err = s.DB.Auth().RevokeAdminToken(r.Context(), tk.ID); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, adminTokenDTO(tk, s.cfg.Clock()))
	return nil
}

func (s *server) rotateAdminToken(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req RotateAdminTokenRequest
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	var grace time.Duration
	if req.Grace != "" {
		var err error
		grace, err = time.ParseDuration(req.Grace)
		if err != nil || grace < 0 || grace > maxRotationGrace {
			return errorf(codeInvalid, "grace %.40q must be a duration like 0s, 10m or 24h, at most 720h", req.Grace)
		}
	}
	tk, err := s.adminTokenRef(r)
	if err != nil {
		return err
	}
	rot, err := s.DB.Auth().RotateAdminToken(r.Context(), tk.ID, grace, actor(r))
	if err != nil {
		return err
	}
	now := s.cfg.Clock()
	w.Header().Set("Location", "/api/v1/admin-tokens/"+rot.Token.ID)
	writeJSON(w, http.StatusCreated, RotatedAdminToken{
		Token: adminTokenDTO(rot.Token, now), Secret: rot.Secret, Replaced: adminTokenDTO(rot.Old, now),
	})
	return nil
}
