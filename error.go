package kiln

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error class. The API maps each to one
// HTTP status in one place; the CLI and scripts match on it.
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
