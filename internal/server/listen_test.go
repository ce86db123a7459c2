package server

import (
	"log/slog"
	"net"
	"strings"
	"testing"
)

// A server whose address is taken says so and how to choose another,
// rather than the operating system's words alone.
// Proves B281 (docs/behaviours.md).
func TestListenAddressInUseSaysWhatToDo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := DefaultConfig()
	cfg.Listen, cfg.DataDir, cfg.LocalAgents = ln.Addr().String(), t.TempDir(), 0
	err = Run(t.Context(), cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "the address is in use (another kiln server?)") || !strings.Contains(err.Error(), "--listen HOST:PORT") {
		t.Fatalf("Run on a taken address: %v", err)
	}
}
