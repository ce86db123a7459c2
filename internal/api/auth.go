package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

type ctxKey struct{}

// authenticate lets a request through with a valid admin bearer token and
// keeps the token in its context (for "created by" and the actor of a
// dispatch).
func (s *server) authenticate(next http.Handler) http.Handler {
	return s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		h := r.Header.Get("Authorization")
		if h == "" {
			return errorf(kiln.CodeUnauthorized, "missing authorization; send Authorization: Bearer <admin token>")
		}
		scheme, secret, ok := strings.Cut(h, " ")
		secret = strings.TrimSpace(secret)
		if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
			return errorf(kiln.CodeUnauthorized, "the Authorization header must be \"Bearer <admin token>\"")
		}
		tk, err := s.DB.Auth().AuthenticateAdmin(r.Context(), secret)
		switch {
		case kiln.ErrorCode(err) == kiln.CodeUnauthorized:
			return errorf(kiln.CodeUnauthorized, "invalid or expired token")
		case err != nil:
			if r.Context().Err() == nil {
				s.log.Error("api: authenticating a request failed", "path", r.URL.Path, "err", err)
			}
			return errorf(kiln.CodeUnavailable, "the database is unavailable; try again")
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, tk)))
		return nil
	})
}

// actor names who made a request: "api:<admin token name>".
func actor(r *http.Request) string {
	if tk, ok := r.Context().Value(ctxKey{}).(store.AdminToken); ok {
		return "api:" + tk.Name
	}
	return "api"
}
