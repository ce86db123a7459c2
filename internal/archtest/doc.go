// Package archtest holds no code, only the test that enforces the package
// rules of docs/ARCHITECTURE.md ("Directions") on the import graph of
// kiln's non-test files, so a rule is broken by a failing test rather than
// noticed in review.
package archtest
