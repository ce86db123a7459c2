// Package logstore keeps step logs: it appends the lines agents send, drops
// lines it already has (agents replay after a reconnect), reads them back by
// sequence number, and fans new lines out to live viewers.
//
// Logs live in files, one per step attempt, as JSON lines under the data
// directory: <dir>/<run>/<job>/e<lease epoch>/<step>.jsonl. Files rather
// than database rows because logs are the bulk of what a CI system stores
// (a million lines a second across a fleet is the target) and are read
// sequentially; the database keeps only the small per-step summary. A write
// is one write(2) of whole lines: once Append returns, the lines survive a
// crash of the kiln process (not a power cut, like SQLite's synchronous=NORMAL),
// which is when the orchestrator acknowledges them to the agent.
//
// Live viewers subscribe per job. Publishing never blocks: a subscriber that
// falls behind is closed with Lagged set and resumes by reading from the file,
// so a slow viewer can never grow the server's memory.
package logstore
