// Package workflow turns workflow files (.kiln/workflows/*.yml) into
// validated, immutable plans.
//
// It exists so that every part of kiln that reads a workflow — the linter,
// the trigger matcher, the engine that creates runs and jobs, the agent that
// runs steps — reads the same thing: one front end that walks YAML nodes
// (keeping file, line and column for every error), fills the documented
// defaults, expands static matrices, checks the needs graph, and type-checks
// every ${{ }} expression against the contexts available where it stands.
//
// Parse never runs anything and never does I/O; LoadDir reads a repository's
// workflow directory. A *Workflow returned without error is never modified
// afterwards, by this package or by its callers: share it freely between
// goroutines, and treat its slices as read-only.
//
// The user-facing format is documented in docs/workflow.md.
package workflow
