// Package localrun is `kiln run`: it runs a repository's workflows on this
// machine through the real orchestrator — an in-process server on a
// temporary SQLite database and one agent connected over a real WebSocket —
// against the working tree as it is, uncommitted changes included. What
// passes here passes on the server, because it is the same code.
package localrun
