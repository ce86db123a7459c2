// Package trigger decides which workflows an event starts, and says why.
//
// It exists so that the server, `kiln lint --explain` and the dashboard all
// give the same answer with the same explanation: forge payloads (GitHub,
// Gitea) are normalized into a kiln.Event, and Match checks the event
// against a workflow's `on:` and returns a Decision with a trace of every
// check it made — stored on the run, so "why did (or didn't) this run?"
// always has an answer.
//
// Matching semantics (docs/workflow.md; B10, B11): a workflow with no
// triggers never matches; its triggers are tried in the order written and
// the first that matches wins; an empty filter matches everything; branch
// and tag filters match if no "!" pattern excludes the name and some other
// pattern (if there is one) matches it; path filters drop excluded files
// first and match if a remaining file matches an include pattern (or if
// there are only exclusions and a file remains). An event without changed
// files does not match a path filter; an event whose changed files are
// unavailable or unknown matches it conservatively, and the trace says so.
package trigger
