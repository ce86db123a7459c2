package api

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kilnci/kiln"
)

// handlerFunc is an API handler: it writes its answer, or returns an error
// that wrap turns into the JSON error shape.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

const (
	codeInvalid  = kiln.CodeInvalid
	codeNotFound = kiln.CodeNotFound
)

func errorf(code kiln.Code, format string, args ...any) error {
	return kiln.Errorf(code, format, args...)
}

// statusError is an error whose HTTP status is not the one its code maps
// to (405 Method Not Allowed, 415).
type statusError struct {
	status int
	code   kiln.Code
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// wrap runs h and answers its error, if any.
func (s *server) wrap(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// writeError answers err: a kiln.Error with its code's status and its
// message; anything else as a logged "internal error".
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	body := kiln.BodyOf(err)
	status := body.Error.Code.HTTPStatus()
	var se *statusError
	if errors.As(err, &se) {
		body.Error = kiln.ErrorDetail{Code: se.code, Message: se.msg}
		status = se.status
	}
	if body.Error.Code == kiln.CodeInternal && r.Context().Err() == nil {
		s.log.Error("api: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="kiln"`)
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to tell it
}

// decodeBody reads a JSON request body into v strictly: Content-Type
// application/json, at most MaxBodyBytes, no unknown fields, one value.
// optional lets an empty body (no Content-Type needed) mean v's zero value.
func (s *server) decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	if r.ContentLength == 0 {
		if optional {
			return nil
		}
		return errorf(codeInvalid, "the request body is empty; send a JSON object")
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return &statusError{status: http.StatusUnsupportedMediaType, code: codeInvalid,
			msg: "send the request body as JSON with Content-Type: application/json"}
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) && optional {
			return nil
		}
		return bodyError(err, s.cfg.MaxBodyBytes)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return bodyError(err, s.cfg.MaxBodyBytes)
		}
		return errorf(codeInvalid, "the request body has more after its JSON value; send exactly one object")
	}
	return nil
}

// bodyError turns a decoding error into a sentence naming what is wrong.
func bodyError(err error, limit int64) error {
	var (
		mbe    *http.MaxBytesError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return errorf(kiln.CodeTooLarge, "the request body is larger than %d bytes", limit)
	case errors.Is(err, io.EOF):
		return errorf(codeInvalid, "the request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(codeInvalid, "the request body is not valid JSON: it ends too soon")
	case errors.As(err, &syntax):
		return errorf(codeInvalid, "the request body is not valid JSON: %s (at byte %d)", syntax.Error(), syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return errorf(codeInvalid, "the request body must be a JSON object, not %s", typ.Value)
		}
		return errorf(codeInvalid, "field %q must be %s, not %s", typ.Field, article(typ.Type.String()), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return errorf(codeInvalid, "the request body has an unknown field %s", name)
	}
	var ke *kiln.Error
	if errors.As(err, &ke) {
		return err
	}
	return errorf(codeInvalid, "the request body could not be read: %v", err)
}

// article names a Go type the way a person would.
func article(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "[]"), strings.HasPrefix(t, "kiln.Labels"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "an object"
	}
	return "an object"
}

// queryInt reads an integer query parameter within [lo, hi]; def when absent.
func queryInt(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, errorf(codeInvalid, "query parameter %s=%q must be a whole number from %d to %d", name, raw, lo, hi)
	}
	return n, nil
}

// queryBool reads a boolean query parameter (true/false/1/0).
func queryBool(r *http.Request, name string) (bool, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(raw)
	if err != nil {
		return false, errorf(codeInvalid, "query parameter %s=%q must be true or false", name, raw)
	}
	return b, nil
}

// checkQuery refuses query parameters the route does not know, so a typo
// (?stauts=failed) is an error instead of a silently unfiltered answer.
func checkQuery(r *http.Request, known ...string) error {
	for k := range r.URL.Query() {
		ok := false
		for _, n := range known {
			if k == n {
				ok = true
				break
			}
		}
		if !ok {
			if len(known) == 0 {
				return errorf(codeInvalid, "unknown query parameter %q; this route takes none", k)
			}
			return errorf(codeInvalid, "unknown query parameter %q; this route takes %s", k, strings.Join(known, ", "))
		}
	}
	return nil
}

// validRef reports whether a path value can name a stored row: short,
// valid UTF-8, printable. Anything else names nothing (and must not reach
// PostgreSQL, which refuses invalid UTF-8 and NUL bytes with an error).
func validRef(s string) bool {
	if s == "" || len(s) > 128 || !utf8.ValidString(s) {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}
