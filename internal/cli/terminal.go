package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// Text kiln prints comes from strangers too: a step writes its log lines, an
// agent reports its hostname and version, a workflow names its jobs and
// steps. Printed raw, an escape sequence in them could move the cursor,
// rewrite lines printed before, retitle the window, or on some terminals
// answer back as typed input. terminalSafe makes every control character
// visible instead.

// terminalSafe returns s with every C0 and C1 control character but tab,
// DEL, a byte that is not UTF-8, and the Unicode bidirectional controls
// (which reorder what is shown) written as a visible escape (\x1b,
// \u202e). With colour (stdout is a terminal), SGR sequences — ESC [ digits
// and semicolons m, which set colours and bold — are kept, so a coloured
// build log still reads in colour.
func terminalSafe(s string, colour bool) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		if colour && s[i] == 0x1b {
			if n := sgrLen(s[i:]); n > 0 {
				b.WriteString(s[i : i+n])
				i += n
				continue
			}
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 && r != '\t', r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f, isBidiControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// needsEscape is the fast path: most lines hold nothing to escape.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\t' || c == 0x7f {
			return true
		}
		if c >= 0x80 {
			for _, r := range s[i:] {
				if r == utf8.RuneError || r >= 0x80 && r <= 0x9f || isBidiControl(r) {
					return true
				}
			}
			return false
		}
	}
	return false
}

// sgrLen is the length of the SGR sequence s starts with, or 0.
func sgrLen(s string) int {
	if len(s) < 3 || s[0] != 0x1b || s[1] != '[' {
		return 0
	}
	for i := 2; i < len(s) && i < 64; i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9', c == ';':
		case c == 'm':
			return i + 1
		default:
			return 0
		}
	}
	return 0
}

func isBidiControl(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c
}

// isTerminal reports whether w is a terminal (colour may pass).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// wantColour: colour on a terminal, unless NO_COLOR is set to anything
// (https://no-color.org).
func wantColour(terminal bool, getenv func(string) string) bool {
	return terminal && getenv("NO_COLOR") == ""
}

// secretNote tells where a new token's secret goes: below on a terminal,
// else into whatever stdout was redirected to (a file the user named), so
// "below" never points at nothing.
func secretNote(e *env, what string) string {
	if isTerminal(e.stdout) {
		return what + " below is shown only once:"
	}
	return what + " is written to stdout, and shown only once: keep it"
}
