package api

import (
	"net/http"
	"strings"
)

// route is one entry of the API surface. docs/openapi.yaml lists the same
// method and path pairs; TestOpenAPIMatchesRoutes keeps them equal.
type route struct {
	method  string
	path    string // http.ServeMux pattern path, {name} for wildcards
	public  bool   // no token needed
	handler handlerFunc
}

// table is the whole surface of the API.
func (s *server) table() []route {
	return []route{
		{"GET", "/health", true, s.health},
		{"GET", "/ready", true, s.ready},

		{"GET", "/api/v1/runs", false, s.listRuns},
		{"GET", "/api/v1/runs/{run}", false, s.getRun},
		{"POST", "/api/v1/runs/{run}/cancel", false, s.cancelRun},
		{"POST", "/api/v1/runs/{run}/rerun", false, s.rerunRun},
		{"POST", "/api/v1/runs/{run}/approve", false, s.approveRun},
		{"GET", "/api/v1/runs/{run}/logs", false, s.runLogs},
		{"GET", "/api/v1/runs/{run}/artifacts", false, s.listArtifacts},
		{"GET", "/api/v1/runs/{run}/artifacts/{name}", false, s.getArtifact},
		{"GET", "/api/v1/runs/{run}/timeline", false, s.runTimeline},

		{"POST", "/api/v1/dispatch", false, s.dispatch},
		{"GET", "/api/v1/events", false, s.listEvents},
		{"GET", "/api/v1/events/{id}", false, s.getEvent},

		{"GET", "/api/v1/queue", false, s.queue},
		{"GET", "/api/v1/agents", false, s.listAgents},
		{"POST", "/api/v1/agents/{id}/drain", false, s.drainAgent},
		{"POST", "/api/v1/agents/claim", true, s.claimAgent},
		{"GET", "/api/v1/scalers", false, s.listScalers},

		{"GET", "/api/v1/tokens", false, s.listTokens},
		{"POST", "/api/v1/tokens", false, s.createToken},
		{"DELETE", "/api/v1/tokens/{id}", false, s.revokeToken},

		{"GET", "/api/v1/admin-tokens", false, s.listAdminTokens},
		{"POST", "/api/v1/admin-tokens", false, s.createAdminToken},
		{"DELETE", "/api/v1/admin-tokens/{id}", false, s.revokeAdminToken},
		{"POST", "/api/v1/admin-tokens/{id}/rotate", false, s.rotateAdminToken},

		{"GET", "/api/v1/sources", false, s.listSources},
		{"POST", "/api/v1/sources", false, s.createSource},
		{"GET", "/api/v1/sources/{name}", false, s.getSource},
		{"PATCH", "/api/v1/sources/{name}", false, s.updateSource},
		{"DELETE", "/api/v1/sources/{name}", false, s.deleteSource},
		{"POST", "/api/v1/sources/{name}/trigger", false, s.trigger},
		{"GET", "/api/v1/sources/{name}/hook", false, s.sourceHook},
	}
}

// Roles. An admin token may call every route. A read-only token may call
// every GET but adminReads, and nothing else: a route added to the table is
// closed to read-only tokens unless it only reads. TestRolesOnEveryRoute
// walks the table.

// adminReads are the GET routes that show tokens or a source's
// configuration (the names of its secrets' variables, its hook): admins
// only.
var adminReads = map[string]bool{
	"/api/v1/tokens":              true,
	"/api/v1/admin-tokens":        true,
	"/api/v1/sources":             true,
	"/api/v1/sources/{name}":      true,
	"/api/v1/sources/{name}/hook": true,
}

// readOnlyMay reports whether a read-only token may call the route.
func readOnlyMay(method, path string) bool {
	return method == http.MethodGet && !adminReads[path]
}

// routes builds the mux. Paths under /api/ that match no route answer a
// JSON 404, or a JSON 405 naming the allowed methods.
func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.table() {
		h := s.wrap(rt.handler)
		if !rt.public {
			h = s.authenticate(rt.method, rt.path, h)
		}
		mux.Handle(rt.method+" "+rt.path, h)
	}
	mux.Handle("/api/", s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return s.noRoute(mux, w, r)
	}))
	return mux
}

var methods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

func (s *server) noRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) error {
	var allowed []string
	for _, m := range methods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/api/" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) == 0 {
		return errorf(codeNotFound, "there is no API route %s", r.URL.Path)
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	return &statusError{status: http.StatusMethodNotAllowed, code: codeInvalid,
		msg: r.Method + " is not allowed on " + r.URL.Path + "; use " + strings.Join(allowed, " or ")}
}

// Route is one method and path of the API, for documentation and tests.
type Route struct {
	Method string
	Path   string
	Public bool // served without a token
	// ReadOnly: a read-only token may call it (an admin token may call
	// every route).
	ReadOnly bool
}

// Routes lists the whole surface in the order routes.go maps it.
func Routes() []Route {
	var out []Route
	for _, rt := range (&server{}).table() {
		out = append(out, Route{Method: rt.method, Path: rt.path, Public: rt.public, ReadOnly: readOnlyMay(rt.method, rt.path)})
	}
	return out
}
