package kiln

import (
	"errors"
	"fmt"
	"net/http"
)

// Code is a stable, machine-readable error class. Each maps to one HTTP
// status (HTTPStatus), for the API and the webhook handler alike; the CLI
// and scripts match on it.
type Code string

const (
	CodeInvalid      Code = "invalid"      // the request or input is malformed
	CodeNotFound     Code = "not_found"    // no such run, job, token, source …
	CodeConflict     Code = "conflict"     // the state changed under the request (lost a compare-and-set, already finished)
	CodeUnauthorized Code = "unauthorized" // missing or wrong credentials
	CodeForbidden    Code = "forbidden"    // credentials are fine but may not do this
	CodeTooLarge     Code = "too_large"    // over a size limit
	CodeUnavailable  Code = "unavailable"  // a dependency (database, forge) is down; retry later
	CodeInternal     Code = "internal"     // a bug or an unexpected failure; details only in the server log
)

// Error is an error meant to be shown: its Message is a plain sentence safe
// to put in front of the user who caused it (no internal detail, no secret).
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, CodeInternal
// for any other non-nil error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns the message of the first *Error in err's chain, and a
// generic sentence for any other error, so internal details never leak.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// HTTPStatus is the status an HTTP answer carrying an error of code has.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// CodeOfStatus is the code of an HTTP error answer that carries no
// ErrorBody (a proxy's page): the inverse of HTTPStatus, plus the statuses
// only proxies and the HTTP layer answer with.
func CodeOfStatus(status int) Code {
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType:
		return CodeInvalid
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeConflict
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return CodeUnavailable
	}
	return CodeInternal
}

// ErrorBody is the JSON shape of every error kiln's HTTP server answers,
// on the API and on webhooks: {"error": {"code": …, "message": …}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the stable code and the sentence of an error.
type ErrorDetail struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// BodyOf is the ErrorBody answering err: its *Error's code and message, or
// "internal error" without detail.
func BodyOf(err error) ErrorBody {
	return ErrorBody{Error: ErrorDetail{Code: ErrorCode(err), Message: ErrorMessage(err)}}
}
