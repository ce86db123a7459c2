package expr

import (
	"unicode"
	"unicode/utf8"
)

// foldString maps every rune to one representative of its simple case
// folding orbit (the smallest rune of the orbit), so two strings that differ
// only in case fold to the same bytes: 'ς', 'σ' and 'Σ' fold alike, and so
// do 'k', 'K' and the Kelvin sign. Simple folding maps one rune to one
// rune, as an ordinal case-insensitive comparison does, so 'İ' (dotted
// capital I) does not fold to 'i' and 'ß' does not fold to "ss". Bytes that
// are not valid UTF-8 are kept as they are.
func foldString(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	b := make([]byte, 0, len(s))
	if ascii {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
		}
		return string(b)
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			b = append(b, s[i])
			i++
			continue
		}
		b = utf8.AppendRune(b, foldRune(r))
		i += size
	}
	return string(b)
}

// foldRune returns the smallest rune of r's simple folding orbit. For
// ASCII letters that is the upper-case letter, so it lower-cases ASCII
// instead to match the fast path above.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	if least < utf8.RuneSelf && least >= 'A' && least <= 'Z' {
		least += 'a' - 'A' // the Kelvin sign folds with k, the long s with s
	}
	return least
}
