// Package api is kiln's operator surface over HTTP: the REST API under
// /api/v1 (runs, logs, dispatch, queue, agents, tokens, sources, the event
// log), /health and /ready, and the Go client the CLI and the end-to-end
// tests use.
//
// routes.go maps the whole surface in one table; docs/openapi.yaml documents
// the same table and a test keeps the two equal. Handlers return errors;
// one function turns a kiln.Error into its HTTP status (kiln.Code.HTTPStatus)
// and the JSON shape {"error": {"code", "message"}} (kiln.ErrorBody) that
// webhooks use too.
// Internal errors are logged with their detail and shown as "internal
// error". Every /api/v1 route needs an admin bearer token.
//
// Files: api.go (Deps, Config, New), routes.go (the table), errors.go
// (error mapping, strict JSON bodies), auth.go (bearer tokens), dto.go (the
// JSON the API answers), runs.go, logs.go (history and the live stream),
// ingress.go (dispatch, trigger, the event log), fleet.go (agents, queue),
// tokens.go, sources.go, client.go and client_*.go (the Go client). The
// apitest package starts the real API over a real store for tests.
package api
