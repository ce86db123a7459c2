package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// A local agent's JSON log line becomes one record of the server's log, at
// its level and with its attributes; other output is kept as it is.
// Proves B67 (docs/behaviours.md).
func TestRelayLineUnwrapsTheAgentsRecords(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("agent", "local-1")
	relayLine(log, []byte(`{"time":"2026-11-30T05:47:33Z","level":"WARN","msg":"no connection to the orchestrator","retry_in":"1s","attempt":3}`))
	relayLine(log, []byte(`panic: something broke`))
	relayLine(log, []byte(`{"msg":"no level"}`))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d records, want 3:\n%s", len(lines), buf.String())
	}
	var recs []map[string]any
	for _, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if r := recs[0]; r["level"] != "WARN" || r["msg"] != "no connection to the orchestrator" ||
		r["retry_in"] != "1s" || r["attempt"] != 3.0 || r["agent"] != "local-1" {
		t.Errorf("relayed record %v", r)
	}
	if strings.Contains(lines[0], "2026-11-30T05:47:33Z") {
		t.Errorf("the agent's own time was kept: %s", lines[0])
	}
	if r := recs[1]; r["level"] != "INFO" || r["msg"] != "panic: something broke" {
		t.Errorf("plain line %v", r)
	}
	if r := recs[2]; r["level"] != "INFO" || r["msg"] != "no level" {
		t.Errorf("record without a level %v", r)
	}
}
