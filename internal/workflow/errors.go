package workflow

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kilnci/kiln"
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

// suggest returns the candidate closest to word if it is close enough to be
// a likely typo ("" otherwise), for "did you mean" hints.
func suggest(word string, candidates []string) string {
	best, bestDist := "", max(1, len(word)/3)+1
	lw := strings.ToLower(word)
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := editDistance(lw, lc)
		if len(lw) >= 3 && (strings.HasPrefix(lc, lw) || strings.HasPrefix(lw, lc)) {
			d = min(d, 1) // "bool" for "boolean"
		}
		if d < bestDist && d < min(len(lw), len(lc)) {
			best, bestDist = c, d
		}
	}
	return best
}

// didYouMean formats a suggestion as a sentence suffix.
func didYouMean(word string, candidates []string) string {
	if s := suggest(word, candidates); s != "" {
		return fmt.Sprintf("; did you mean %q?", s)
	}
	return ""
}

// editDistance is the optimal-string-alignment distance between a and b,
// in bytes: insertions, deletions, substitutions and swaps of neighbours
// ("og" for "go") each cost one. It gives up on long inputs, which are
// never typos of short keys.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 20
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
