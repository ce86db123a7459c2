// Package jsonwire reads and writes the few JSON shapes on kiln's hottest
// paths — an agent's log frames, the lines of a stored log, the lines a
// log viewer receives — without reflection and with one allocation per
// text instead of one per field.
//
// A Reader is deliberately narrow: it understands objects, arrays, strings
// and integers, and gives up (OK reports false) on anything else — a float,
// a null, a lone surrogate escape, invalid UTF-8, an unexpected key. Every
// caller then decodes the same bytes again with a full JSON decoder, so a
// Reader never decides what an input means, only whether it can take the
// fast road; the differential fuzz targets of its callers hold it to the
// full decoder's answers.
package jsonwire

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Reader is a cursor over one JSON text. Strings without escapes are
// substrings of the text, so a caller that builds it from a []byte pays one
// copy for the whole document.
type Reader struct {
	s      string
	i      int
	failed bool
}

// NewReader starts reading s.
func NewReader(s string) *Reader { return &Reader{s: s} }

// OK reports whether everything read so far was understood.
func (r *Reader) OK() bool { return !r.failed }

// Fail marks the text as not for the fast road (an unexpected key, say).
func (r *Reader) Fail() { r.failed = true }

// End reports whether only whitespace is left and nothing failed.
func (r *Reader) End() bool {
	r.skip()
	return !r.failed && r.i == len(r.s)
}

func (r *Reader) skip() {
	for r.i < len(r.s) {
		switch r.s[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// consume reads the byte c after any whitespace, or fails.
func (r *Reader) consume(c byte) bool {
	r.skip()
	if r.failed || r.i >= len(r.s) || r.s[r.i] != c {
		r.failed = true
		return false
	}
	r.i++
	return true
}

// Object reads an object, calling field for each key with the reader at
// the key's value; field must read the value (or Fail). An empty object
// calls field never.
func (r *Reader) Object(field func(key string)) {
	if !r.consume('{') {
		return
	}
	r.skip()
	if r.i < len(r.s) && r.s[r.i] == '}' {
		r.i++
		return
	}
	for !r.failed {
		key := r.String()
		if !r.consume(':') {
			return
		}
		field(key)
		r.skip()
		if r.failed || r.i >= len(r.s) {
			r.failed = true
			return
		}
		switch r.s[r.i] {
		case ',':
			r.i++
		case '}':
			r.i++
			return
		default:
			r.failed = true
		}
	}
}

// Fields reads an object whose keys are all among names (at most 64), each
// at most once, calling field with the key's index in names; any other key,
// or one repeated, fails — full decoders match keys without regard to
// case and keep a repeated key's last value, which is theirs to decide.
func (r *Reader) Fields(names []string, field func(i int)) {
	var seen uint64
	r.Object(func(key string) {
		i := slices.Index(names, key)
		if i < 0 || seen&(1<<i) != 0 {
			r.failed = true
			return
		}
		seen |= 1 << i
		field(i)
	})
}

// Array reads an array, calling elem with the reader at each element.
func (r *Reader) Array(elem func()) {
	if !r.consume('[') {
		return
	}
	r.skip()
	if r.i < len(r.s) && r.s[r.i] == ']' {
		r.i++
		return
	}
	for !r.failed {
		elem()
		r.skip()
		if r.failed || r.i >= len(r.s) {
			r.failed = true
			return
		}
		switch r.s[r.i] {
		case ',':
			r.i++
		case ']':
			r.i++
			return
		default:
			r.failed = true
		}
	}
}

// Uint reads a non-negative integer that fits 64 bits.
func (r *Reader) Uint() uint64 {
	r.skip()
	return r.digits()
}

// digits reads the digits of an integer at the cursor, nothing before them
// (a sign is followed by its digits at once).
func (r *Reader) digits() uint64 {
	if r.failed {
		return 0
	}
	start := r.i
	var n uint64
	for r.i < len(r.s) && r.s[r.i] >= '0' && r.s[r.i] <= '9' {
		n = n*10 + uint64(r.s[r.i]-'0')
		r.i++
	}
	digits := r.s[start:r.i]
	if digits == "" || (len(digits) > 1 && digits[0] == '0') || r.numberGoesOn() {
		r.failed = true
		return 0
	}
	if len(digits) > 19 { // may have wrapped: let strconv judge
		var err error
		if n, err = strconv.ParseUint(digits, 10, 64); err != nil {
			r.failed = true
		}
	}
	return n
}

// Int reads an integer that fits 64 bits.
func (r *Reader) Int() int64 {
	r.skip()
	neg := r.i < len(r.s) && r.s[r.i] == '-'
	if neg {
		r.i++
	}
	u := r.digits()
	switch {
	case r.failed:
		return 0
	case !neg && u <= 1<<63-1:
		return int64(u)
	case neg && u <= 1<<63:
		return -int64(u-1) - 1
	}
	r.failed = true
	return 0
}

// NativeInt reads an integer that fits Go's int.
func (r *Reader) NativeInt() int {
	v := r.Int()
	if int64(int(v)) != v {
		r.failed = true
		return 0
	}
	return int(v)
}

// numberGoesOn reports a fraction or exponent after the digits: not an
// integer, so not for this reader.
func (r *Reader) numberGoesOn() bool {
	if r.i >= len(r.s) {
		return false
	}
	c := r.s[r.i]
	return c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+'
}

// String reads a string. Without escapes it is a substring of the text.
func (r *Reader) String() string {
	if !r.consume('"') {
		return ""
	}
	start := r.i
	if end := strings.IndexByte(r.s[start:], '"'); end >= 0 && plainASCII(r.s[start:start+end]) {
		r.i = start + end + 1
		return r.s[start : start+end]
	}
	for r.i < len(r.s) {
		c := r.s[r.i]
		switch {
		case c == '"':
			r.i++
			return r.s[start : r.i-1]
		case c == '\\':
			return r.escaped(start)
		case c < 0x20:
			r.failed = true
			return ""
		case c < utf8.RuneSelf:
			r.i++
		default:
			if !r.rune() {
				return ""
			}
		}
	}
	r.failed = true
	return ""
}

// plainASCII reports whether s is printable ASCII without a backslash —
// a string's text as it stands — eight bytes at a time: a byte below 0x20
// borrows into, and a byte from 0x80 has, its top bit.
func plainASCII(s string) bool {
	if strings.IndexByte(s, '\\') >= 0 {
		return false
	}
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if ((w-0x20*ones)|w)&highs != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// rune steps over one multi-byte character, failing on invalid UTF-8
// (which full decoders treat each in their own way).
func (r *Reader) rune() bool {
	c, size := utf8.DecodeRuneInString(r.s[r.i:])
	if c == utf8.RuneError && size == 1 {
		r.failed = true
		return false
	}
	r.i += size
	return true
}

// escaped finishes a string that has an escape, copying it.
func (r *Reader) escaped(start int) string {
	b := make([]byte, 0, r.i-start+16)
	b = append(b, r.s[start:r.i]...)
	for r.i < len(r.s) {
		c := r.s[r.i]
		switch {
		case c == '"':
			r.i++
			return string(b)
		case c == '\\':
			var ok bool
			if b, ok = r.unescape(b); !ok {
				r.failed = true
				return ""
			}
		case c < 0x20:
			r.failed = true
			return ""
		case c < utf8.RuneSelf:
			b = append(b, c)
			r.i++
		default:
			from := r.i
			if !r.rune() {
				return ""
			}
			b = append(b, r.s[from:r.i]...)
		}
	}
	r.failed = true
	return ""
}

// unescape appends the character of the escape at r.i. Surrogates (pairs
// or lone) are left to the full decoder.
func (r *Reader) unescape(b []byte) ([]byte, bool) {
	if r.i+1 >= len(r.s) {
		return b, false
	}
	c := r.s[r.i+1]
	r.i += 2
	switch c {
	case '"', '\\', '/':
		return append(b, c), true
	case 'b':
		return append(b, '\b'), true
	case 'f':
		return append(b, '\f'), true
	case 'n':
		return append(b, '\n'), true
	case 'r':
		return append(b, '\r'), true
	case 't':
		return append(b, '\t'), true
	case 'u':
		if r.i+4 > len(r.s) {
			return b, false
		}
		v, err := strconv.ParseUint(r.s[r.i:r.i+4], 16, 32)
		if err != nil || (v >= 0xd800 && v < 0xe000) {
			return b, false
		}
		r.i += 4
		return utf8.AppendRune(b, rune(v)), true
	}
	return b, false
}
