package store

import (
	"errors"
	"fmt"

	"github.com/kilnci/kiln"
)

// Sentinel errors; match them with errors.Is. Errors carrying them are also
// *kiln.Error values (errors.As) with a plain message and a stable code.
var (
	// ErrNotFound: no such run, job, token, source, delivery or lease.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the row is not in a state that allows the change (a job
	// already finished, a delivery claimed by another processor, a name taken).
	ErrConflict = errors.New("conflict")
	// ErrStaleLease: an agent reported on a job under a lease epoch that is
	// no longer the job's (it was requeued, recovered or finished since).
	// Nothing was changed; the agent's update is to be dropped.
	ErrStaleLease = errors.New("stale lease")
	// ErrUnsettled: a completion asked to settle (Completion.Settle) found
	// its job's uploads in flight; nothing was stored.
	ErrUnsettled = errors.New("uploads in flight")
	// ErrUnauthorized: a token is unknown, revoked, expired or consumed.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrInvalid: the input is malformed.
	ErrInvalid = errors.New("invalid")
	// ErrAgentIDBound: an agent registered an id bound to another agent's
	// secret (see agentidentity.go).
	ErrAgentIDBound = errors.New("agent id bound to another secret")
)

// codedError carries a sentinel for errors.Is and a *kiln.Error for
// errors.As, kiln.ErrorCode and kiln.ErrorMessage.
type codedError struct {
	sentinel error
	kerr     *kiln.Error
}

func (e *codedError) Error() string   { return e.kerr.Message }
func (e *codedError) Unwrap() []error { return []error{e.sentinel, e.kerr} }

func newError(sentinel error, format string, args ...any) error {
	code := kiln.CodeInternal
	switch sentinel {
	case ErrNotFound:
		code = kiln.CodeNotFound
	case ErrConflict, ErrStaleLease, ErrAgentIDBound, ErrUnsettled:
		code = kiln.CodeConflict
	case ErrUnauthorized:
		code = kiln.CodeUnauthorized
	case ErrInvalid:
		code = kiln.CodeInvalid
	}
	return &codedError{sentinel: sentinel, kerr: &kiln.Error{Code: code, Message: fmt.Sprintf(format, args...)}}
}

func notFound(format string, args ...any) error { return newError(ErrNotFound, format, args...) }
func conflict(format string, args ...any) error { return newError(ErrConflict, format, args...) }
func invalid(format string, args ...any) error  { return newError(ErrInvalid, format, args...) }
func unsettledErr(jobID string) error {
	return newError(ErrUnsettled, "job %s has uploads in flight; its completion waits for them", jobID)
}
func staleLease(format string, args ...any) error {
	return newError(ErrStaleLease, format, args...)
}
