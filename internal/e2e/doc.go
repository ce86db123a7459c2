// Package e2e holds kiln's end-to-end tests: a real orchestrator (the
// composition root, server.Run, in this process, or the `kiln server`
// process), real `kiln agent` processes running real shell steps, over real
// sockets on 127.0.0.1, with SQLite and PostgreSQL behind them, real git
// repositories as local sources and a fake GitHub API (the one edge that
// cannot run here) speaking GitHub's wire format. The package has no code of
// its own; everything is in its tests.
//
// The tests build the kiln binary once (with -race when the tests run with
// it) and fail on a data race any of its processes reports.
package e2e
