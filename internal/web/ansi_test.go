package web

import (
	"strings"
	"testing"
)

// B307: ANSI colours become classes, other escapes are dropped, text is
// escaped, and a carriage return keeps what was drawn after it.
func TestANSIHTML(t *testing.T) {
	for in, want := range map[string]string{
		"plain <b>&":                                "plain &lt;b&gt;&amp;",
		"\x1b[31mred\x1b[0m done":                   `<span class="fg1">red</span> done`,
		"\x1b[1;92mok\x1b[22m still":                `<span class="fg10 b">ok</span><span class="fg10"> still</span>`,
		"\x1b[38;5;196mx\x1b[m":                     `x`,
		"\x1b[2K\x1b]0;title\x07text":               `text`,
		"10%\r50%\r100%":                            `100%`,
		"\x1b[44m<script>\x1b[49m":                  `<span class="bg4">&lt;script&gt;</span>`,
		"\x1b[":                                     ``,
		"a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\": `alink`,
	} {
		if got := ansiHTML(in); got != want {
			t.Errorf("ansiHTML(%q) = %q, want %q", in, got, want)
		}
	}
}

// B307: any line renders without a panic, and no tag but the spans kiln
// writes comes out of it.
func FuzzANSIHTML(f *testing.F) {
	for _, s := range []string{"\x1b[31mred", "\x1b[38;2;1;2;3mx", "<a>\x1b]0;t\x07", "\r\r\x1b[", "\x1b[1;4;3;90;107m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := ansiHTML(s)
		rest := strings.ReplaceAll(out, "</span>", "")
		for {
			i := strings.Index(rest, "<span class=\"")
			if i < 0 {
				break
			}
			j := strings.Index(rest[i:], "\">")
			if j < 0 {
				t.Fatalf("an unclosed span tag in %q", out)
			}
			cls := rest[i+len(`<span class="`) : i+j]
			if strings.ContainsAny(cls, `<>"&`) {
				t.Fatalf("class %q", cls)
			}
			rest = rest[:i] + rest[i+j+2:]
		}
		if strings.ContainsAny(rest, "<>") {
			t.Fatalf("ansiHTML(%q) = %q lets a tag through", s, out)
		}
	})
}

// B308: a follow position parses back to what was formatted, and a
// malformed one is refused.
func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{"1|-1:3,0:10", "2|", "", "x|1:2", "1|a:b", "1|0:99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		attempt, from, err := parsePosition(s)
		if err != nil {
			return
		}
		a2, f2, err := parsePosition(string(newEventBatch(attempt, from).appendPosition(nil)))
		if err != nil || a2 != attempt || len(f2) != len(from) {
			t.Fatalf("%q: round trip gave %d %v %v", s, a2, f2, err)
		}
		for k, v := range from {
			if f2[k] != v {
				t.Fatalf("%q: step %d %d != %d", s, k, f2[k], v)
			}
		}
	})
}
