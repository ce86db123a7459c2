package expr

import (
	"fmt"
	"strconv"
)

// Error is a syntax, type or evaluation error. Offset is the byte offset into
// the source string given to Parse, ParseCondition or ParseTemplate (for a
// Template, into the whole template), so callers can map it to a line and
// column of the workflow file.
type Error struct {
	Offset int
	Msg    string
}

func (e *Error) Error() string { return "offset " + strconv.Itoa(e.Offset) + ": " + e.Msg }

func errorf(off int, format string, args ...any) *Error {
	return &Error{Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// guard is the safety net at the API boundary: a panic below it becomes an
// internal error instead of taking down the orchestrator or agent. The
// fuzzers call the unguarded internals so that a panic still fails them.
func guard(errp *error) {
	if r := recover(); r != nil {
		*errp = internalError(r)
	}
}

func internalError(r any) *Error {
	return &Error{Msg: fmt.Sprintf("internal error in the expression evaluator: %v", r)}
}
