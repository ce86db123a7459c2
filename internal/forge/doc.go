// Package forge connects kiln to the places code lives: GitHub (and GitHub
// Enterprise), Gitea/Forgejo, generic webhook senders and git repositories
// on the server's own host. It exists so that the rest of kiln never speaks
// a forge's dialect: the server asks forge to verify a webhook delivery, to
// read a repository's workflow files at a commit, to list the files an event
// changed, to tell an agent how to clone, and to post commit statuses back.
//
// One file per forge (github.go, gitea.go, generic.go, local.go) implements
// the Repo interface; the shared pieces are the source configuration
// (source.go, check.go), webhook verification (verify.go, delivery.go), the
// bounded HTTP client (api.go) and contents API (contents.go), git plumbing
// (git.go), the post-receive hook (hook.go), an immutable-content cache of
// workflow files by commit (cache.go) and the StatusReporter (reporter.go),
// which debounces and retries statuses without ever blocking the run that
// produced them.
//
// Turning a webhook body into a kiln.Event is package trigger's job for
// GitHub and Gitea payloads; forge builds events only for the payloads it
// defines itself (generic webhooks, local pushes).
//
// Everything a stranger controls is bounded: webhook bodies (25 MiB),
// forge API responses (16 MiB), workflow files (1 MiB each), git output.
// Errors users see are kiln.Error sentences that never contain a secret, a
// token or an expected signature.
package forge
