package workflow

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/suggest"
)

// Error is one problem in a workflow file, at a position users can jump to.
// Line and Col are 1-based; Col counts characters (runes), as editors do.
type Error struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"col"`
	Msg  string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// ErrorList is every problem found in one or more files, sorted by file and
// position. Parse returns all the errors of a file, not only the first.
type ErrorList []*Error

// Error prints one `file:line:col: message` line per error.
func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap exposes the list as a kiln.Error with code invalid, so that
// kiln.ErrorCode and kiln.ErrorMessage classify a broken workflow correctly.
func (l ErrorList) Unwrap() error {
	return &kiln.Error{Code: kiln.CodeInvalid, Message: l.Error()}
}

// sort orders the list by file, line and column, keeping the order in which
// errors were found for equal positions, and drops exact duplicates.
func (l ErrorList) sort() ErrorList {
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
	})
	return slices.CompactFunc(l, func(a, b *Error) bool { return *a == *b })
}

// MaxErrors bounds the errors reported for one file, so that a hostile or
// badly broken file produces a readable report and bounded work.
const MaxErrors = 100

// didYouMean formats a suggestion as a sentence suffix.
func didYouMean(word string, candidates []string) string {
	if s := suggest.Closest(word, candidates); s != "" {
		return fmt.Sprintf("; did you mean %q?", s)
	}
	return ""
}
