// Package expr is the `${{ … }}` expression language of workflow files.
//
// Workflow authors are strangers to the orchestrator that evaluates their
// expressions, so the language is deliberately small: literals, lookups in
// named contexts (event, inputs, needs, …), comparisons, boolean operators
// and a handful of functions. Nothing else is evaluated, there are no
// loops, and every phase is bounded: the source length and nesting depth
// when parsing, the number of evaluation steps and the size of produced
// strings when evaluating. Arbitrary input yields an *Error, never a panic
// or a hang.
//
// The package has three phases that run at different times and places:
//
//   - Parse, ParseCondition and ParseTemplate turn source text into an Expr
//     or a Template (lint time and run time).
//   - Check type-checks against a Scope describing which contexts exist at a
//     location in the workflow file and what they look like, so `kiln lint`
//     reports misspellings and type errors with byte offsets before any run.
//   - Eval, Render and Substitute evaluate against concrete JSON-shaped
//     context values (orchestrator or agent, at run time). Substitute is what
//     `run:` scripts use: it never pastes a value into shell text.
//
// docs/expressions.md describes the language for users.
package expr
