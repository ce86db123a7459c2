package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

type ctxKey struct{}

// sessionKey carries the token of a dashboard session: a request made in
// the process on a logged-in browser's behalf (internal/web) carries the
// token the session was opened with instead of its secret. A request from
// the network cannot set a context value.
type sessionKey struct{}

// WithSessionToken returns ctx carrying tk, which authenticates requests
// served in-process with it in place of an Authorization header. The
// caller has checked that tk is usable (store.Sessions.Get does).
func WithSessionToken(ctx context.Context, tk store.AdminToken) context.Context {
	return context.WithValue(ctx, sessionKey{}, tk)
}

// authenticate lets a request for the route method path through with a
// valid admin bearer token whose role allows the route (readOnlyMay), and
// keeps the token in its context (for "created by" and the actor of a
// dispatch).
func (s *server) authenticate(method, path string, next http.Handler) http.Handler {
	readOnly := readOnlyMay(method, path)
	return s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		tk, ok := r.Context().Value(sessionKey{}).(store.AdminToken)
		if !ok {
			var err error
			if tk, err = s.bearer(r); err != nil {
				return err
			}
		}
		if tk.Role != store.RoleAdmin && !(tk.Role == store.RoleReadOnly && readOnly) {
			return forbidden(tk, r)
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, tk)))
		return nil
	})
}

// bearer returns the admin token of the request's Authorization header.
func (s *server) bearer(r *http.Request) (store.AdminToken, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return store.AdminToken{}, errorf(kiln.CodeUnauthorized, "missing authorization; send Authorization: Bearer <admin token>")
	}
	scheme, secret, ok := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return store.AdminToken{}, errorf(kiln.CodeUnauthorized, "the Authorization header must be \"Bearer <admin token>\"")
	}
	tk, err := s.DB.Auth().AuthenticateAdmin(r.Context(), secret)
	switch {
	case kiln.ErrorCode(err) == kiln.CodeUnauthorized:
		return tk, errorf(kiln.CodeUnauthorized, "invalid or expired token")
	case err != nil:
		if r.Context().Err() == nil {
			s.log.Error("api: authenticating a request failed", "path", r.URL.Path, "err", err)
		}
		return tk, errorf(kiln.CodeUnavailable, "the database is unavailable; try again")
	}
	return tk, nil
}

// forbidden is the answer to a token whose role does not allow a route.
func forbidden(tk store.AdminToken, r *http.Request) error {
	what := r.Method + " " + r.URL.Path
	if len(what) > 200 {
		what = what[:200] + "…"
	}
	if tk.Role != store.RoleReadOnly {
		return errorf(kiln.CodeForbidden, "token %q has the unknown role %q; %s needs an admin token", tk.Name, tk.Role, what)
	}
	if r.Method == http.MethodGet {
		return errorf(kiln.CodeForbidden, "token %q has the read-only role, which may not read tokens or source configuration; %s needs an admin token", tk.Name, what)
	}
	return errorf(kiln.CodeForbidden, "token %q has the read-only role, which may only read; %s needs an admin token", tk.Name, what)
}

// RequireToken serves next only to requests with an admin or read-only
// token (401 otherwise, in the API's JSON error shape). The server puts
// /metrics behind it when metrics share the main listener: they name
// sources and repositories.
func RequireToken(db *store.DB, log *slog.Logger, next http.Handler) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{Deps: Deps{DB: db}, cfg: Config{Logger: log}.withDefaults(), log: log}
	return s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		if _, err := s.bearer(r); err != nil {
			return err
		}
		next.ServeHTTP(w, r)
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
