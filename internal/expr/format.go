package expr

import "strconv"

// fmtPart is a piece of a format string: literal text, or the placeholder
// {arg} when arg >= 0.
type fmtPart struct {
	text string
	arg  int
}

// maxPlaceholder bounds the index in {N}; a function call cannot have that
// many arguments within MaxSourceBytes anyway.
const maxPlaceholder = MaxSourceBytes

// parseFormat splits a format string into parts. {{ and }} are literal
// braces; any other brace must be part of a placeholder {N}. On error it
// returns the byte offset in f and a message.
func parseFormat(f string) ([]fmtPart, int, string) {
	var parts []fmtPart
	lit := make([]byte, 0, len(f))
	flush := func() {
		if len(lit) > 0 {
			parts = append(parts, fmtPart{text: string(lit), arg: -1})
			lit = lit[:0]
		}
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch {
		case c == '{' && i+1 < len(f) && f[i+1] == '{', c == '}' && i+1 < len(f) && f[i+1] == '}':
			lit = append(lit, c)
			i++
		case c == '{':
			j := i + 1
			for j < len(f) && isDigit(f[j]) {
				j++
			}
			if j == i+1 || j >= len(f) || f[j] != '}' {
				return nil, i, "format string has a '{' that does not start a placeholder such as {0}; write {{ for a literal brace"
			}
			n, err := strconv.Atoi(f[i+1 : j])
			if err != nil || j-i > 8 || n > maxPlaceholder {
				return nil, i, "format placeholder " + f[i:j+1] + " is out of range"
			}
			flush()
			parts = append(parts, fmtPart{arg: n})
			i = j
		case c == '}':
			return nil, i, "format string has a '}' that does not close a placeholder; write }} for a literal brace"
		default:
			lit = append(lit, c)
		}
	}
	flush()
	return parts, 0, ""
}

// checkFormat checks the argument count against a literal format string.
func checkFormat(c *checker, n *callNode, args []Type) {
	switch args[0].kind() {
	case kObject, kMap, kArray:
		c.errorf(n.args[0].at().pos, "format() needs a format string as its first argument, not %s", args[0].article())
		return
	}
	lit, ok := n.args[0].(*litNode)
	if !ok {
		return
	}
	parts, at, msg := parseFormat(ToString(lit.val))
	if msg != "" {
		c.errorf(lit.pos, "%s (at byte %d of the format string)", msg, at)
		return
	}
	for _, p := range parts {
		if p.arg >= len(args)-1 {
			c.errorf(lit.pos, "format placeholder {%d} has no argument: format() got %s after the format string", p.arg, plural(len(args)-1, "argument"))
			return
		}
	}
}

// evalFormat renders every argument once, computes the result's size and
// refuses before building it if it would pass MaxStringBytes. A format that
// is not a string is its text, as in GitHub Actions: format(null) is empty,
// format(true) is 'true'.
func evalFormat(ev *evaluator, n *callNode, args []any) (any, *Error) {
	f, ok := scalarText(args[0])
	if !ok {
		return nil, errorf(n.args[0].at().pos, "format() needs a format string as its first argument, not %s", kindNames[kindOf(norm(args[0]))])
	}
	if err := ev.chargeBytes(len(f), n.pos); err != nil {
		return nil, err
	}
	parts, at, msg := parseFormat(f)
	if msg != "" {
		return nil, errorf(n.args[0].at().pos, "%s (at byte %d of the format string)", msg, at)
	}
	limit := ev.limits.MaxStringBytes
	texts := make([]string, len(args)-1)
	for i, a := range args[1:] {
		b, err := appendString(nil, a, limit)
		if err != nil {
			return nil, errorf(n.args[i+1].at().pos, "format() argument %d is longer than the limit of %d bytes", i+1, limit)
		}
		if err := ev.chargeBytes(len(b), n.pos); err != nil {
			return nil, err
		}
		texts[i] = string(b)
	}
	size := 0
	for _, p := range parts {
		switch {
		case p.arg < 0:
			size += len(p.text)
		case p.arg >= len(texts):
			return nil, errorf(n.args[0].at().pos, "format placeholder {%d} has no argument: format() got %s after the format string", p.arg, plural(len(texts), "argument"))
		default:
			size += len(texts[p.arg])
		}
		if size > limit {
			return nil, errorf(n.pos, "format() would produce more than the limit of %d bytes", limit)
		}
	}
	if err := ev.chargeBytes(size, n.pos); err != nil {
		return nil, err
	}
	b := make([]byte, 0, size)
	for _, p := range parts {
		if p.arg < 0 {
			b = append(b, p.text...)
		} else {
			b = append(b, texts[p.arg]...)
		}
	}
	return string(b), nil
}
