// Package behaviours keeps docs/behaviours.md true. That page lists every
// externally specified behaviour kiln implements as a numbered line, B<n>,
// naming the tests that prove it; comments and tests cite those numbers
// instead of documents this repository does not hold.
//
// The package has no code of its own: its test parses the page and the
// repository's Go files and fails on a malformed or repeated line, on a
// named test, fuzz target or benchmark that does not exist in the named
// file or does not cite the line's number, on an unknown bench scenario,
// and on a comment citing a number the page does not have.
//
// The same test package keeps docs/lifecycle.md true: every code name it
// cites in backticks (pkg.Func, pkg.Type.Method) must be declared in the
// repository's non-test Go files, parsed with go/parser. These checks live
// in a package of their own so that `go test ./internal/behaviours/` runs
// exactly them.
package behaviours
