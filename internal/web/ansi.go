package web

import (
	"html"
	"strconv"
	"strings"
)

// ansiHTML renders one log line's text as HTML: SGR colour and style
// sequences become spans with classes (fg-1, bg-4, b, i, u; the palette is
// in style.css, checked for contrast), every other escape sequence is
// dropped, a carriage return keeps only what was drawn after it (progress
// bars), and all text is escaped (B307). Colours by number (38;5;n,
// 38;2;r;g;b) are read and ignored: the page allows no inline styles.
func ansiHTML(s string) string {
	if i := strings.LastIndexByte(strings.TrimRight(s, "\r"), '\r'); i >= 0 {
		s = s[i+1:]
	}
	if !strings.ContainsRune(s, 0x1b) {
		return html.EscapeString(s)
	}
	var b strings.Builder
	var st sgr
	open := false
	text := func(t string) {
		if t == "" {
			return
		}
		if cls := st.classes(); cls != "" && !open {
			b.WriteString(`<span class="` + cls + `">`)
			open = true
		}
		b.WriteString(html.EscapeString(t))
	}
	for {
		i := strings.IndexByte(s, 0x1b)
		if i < 0 {
			text(s)
			break
		}
		text(s[:i])
		s = s[i+1:]
		params, final, rest := escape(s)
		s = rest
		if final != 'm' {
			continue
		}
		if open {
			b.WriteString("</span>")
			open = false
		}
		st.apply(params)
	}
	if open {
		b.WriteString("</span>")
	}
	return b.String()
}

// escape splits off the escape sequence at the start of s (after ESC): a
// CSI's parameters and final byte, or nothing for other sequences (OSC up
// to BEL or ST, or a single character).
func escape(s string) (params string, final byte, rest string) {
	if s == "" {
		return "", 0, ""
	}
	switch s[0] {
	case '[':
		for i := 1; i < len(s); i++ {
			if c := s[i]; c >= 0x40 && c <= 0x7e {
				return s[1:i], c, s[i+1:]
			}
		}
		return "", 0, ""
	case ']':
		if i := strings.IndexAny(s, "\a\x1b"); i >= 0 {
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return "", 0, s[i+2:]
			}
			return "", 0, s[i+1:]
		}
		return "", 0, ""
	}
	return "", 0, s[1:]
}

// sgr is the current graphic rendition.
type sgr struct {
	fg, bg        int // 0: default; 1..16: the 16 colours + 1
	bold, it, und bool
}

func (g *sgr) apply(params string) {
	if params == "" {
		*g = sgr{}
		return
	}
	ps := strings.Split(params, ";")
	for i := 0; i < len(ps); i++ {
		n, err := strconv.Atoi(ps[i])
		if err != nil {
			continue
		}
		switch {
		case n == 0:
			*g = sgr{}
		case n == 1:
			g.bold = true
		case n == 3:
			g.it = true
		case n == 4:
			g.und = true
		case n == 22:
			g.bold = false
		case n == 23:
			g.it = false
		case n == 24:
			g.und = false
		case n >= 30 && n <= 37:
			g.fg = n - 30 + 1
		case n >= 90 && n <= 97:
			g.fg = n - 90 + 9
		case n == 39:
			g.fg = 0
		case n >= 40 && n <= 47:
			g.bg = n - 40 + 1
		case n >= 100 && n <= 107:
			g.bg = n - 100 + 9
		case n == 49:
			g.bg = 0
		case n == 38 || n == 48:
			// 38;5;n or 38;2;r;g;b: skip the colour's parameters.
			if i+1 < len(ps) && ps[i+1] == "5" {
				i += 2
			} else if i+1 < len(ps) && ps[i+1] == "2" {
				i += 4
			}
		}
	}
}

func (g sgr) classes() string {
	var c []string
	if g.fg > 0 {
		c = append(c, "fg"+strconv.Itoa(g.fg-1))
	}
	if g.bg > 0 {
		c = append(c, "bg"+strconv.Itoa(g.bg-1))
	}
	if g.bold {
		c = append(c, "b")
	}
	if g.it {
		c = append(c, "i")
	}
	if g.und {
		c = append(c, "u")
	}
	return strings.Join(c, " ")
}
