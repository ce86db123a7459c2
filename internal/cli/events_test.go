package cli

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// B273: `kiln events` cuts a long message at a word's end, never inside a
// character, and marks it; a short one stays whole.
func TestClipCutsAtAWordAndMarksIt(t *testing.T) {
	long := "attempt 2 of 8 failed: could not reach api.github.com: dial tcp: connection refused; retrying in 4s"
	got := clip(long, 60)
	if !strings.HasSuffix(got, "…") || utf8.RuneCountInString(got) > 60 || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Fatalf("clip = %q", got)
	}
	if rest := strings.TrimPrefix(long, strings.TrimSuffix(got, "…")); rest != "" && !strings.ContainsRune(" ,;:", rune(rest[0])) {
		t.Fatalf("cut inside a word: %q | %q", got, rest)
	}
	if got := clip("no workflow matched", 60); got != "no workflow matched" {
		t.Fatalf("short message changed: %q", got)
	}
	if got := clip("first line\nsecond", 60); got != "first line…" {
		t.Fatalf("multi-line message: %q", got)
	}
	if got := clip(strings.Repeat("é", 100), 10); !utf8.ValidString(got) || utf8.RuneCountInString(got) != 10 {
		t.Fatalf("cut inside a character: %q", got)
	}
}
