package jsonwire

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// validText is s with each invalid byte replaced by U+FFFD, as
// encoding/json decodes it.
func validText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

var texts = []string{"", "plain", `"`, `a"b`, `\`, "tab\there", "\x1b[0m", "\x00\x1f\x7f", "é ✓ 🙂", "\xff\xfe", "<a href='x'>&</a>", "\u2028\u2029",
	strings.Repeat("x", 7) + `"`, strings.Repeat("y", 8) + `\`, strings.Repeat("z", 9) + "\n", strings.Repeat("w", 16) + "é"}

// checkString: AppendString writes JSON that decodes to the text, and the
// Reader reads it back to the same.
func checkString(t *testing.T, s string) {
	t.Helper()
	b := AppendString(nil, s)
	var std string
	if err := json.Unmarshal(b, &std); err != nil || std != validText(s) {
		t.Fatalf("%q: wrote %s, which decodes as %q (%v)", s, b, std, err)
	}
	r := NewReader(string(b))
	got := r.String()
	if !r.End() || got != std {
		t.Fatalf("%q: the reader read %s as %q (ok %v)", s, b, got, r.OK())
	}
}

func TestStringsRoundTrip(t *testing.T) {
	for _, s := range texts {
		checkString(t, s)
	}
}

func FuzzString(f *testing.F) {
	for _, s := range texts {
		f.Add(s)
		f.Add(`"` + s + `"`)
	}
	f.Add(`"\ud83d\ude42"`)
	f.Add(`"\u00e9\/\b\f"`)
	f.Fuzz(func(t *testing.T, s string) {
		checkString(t, s)
		// Any quoted text the reader takes, encoding/json reads the same way.
		r := NewReader(s)
		got := r.String()
		if !r.End() {
			return
		}
		var std string
		if err := json.Unmarshal([]byte(s), &std); err != nil || std != got {
			t.Fatalf("%s: the reader read %q, encoding/json %q (%v)", s, got, std, err)
		}
	})
}

func TestNumbers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"-0", 0, true}, {"42", 42, true}, {" 7 ", 7, true},
		{"9223372036854775807", 1<<63 - 1, true}, {"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false}, {"01", 0, false}, {"1.0", 0, false}, {"1e3", 0, false},
		{"-", 0, false}, {"", 0, false}, {"+1", 0, false}, {"99999999999999999999", 0, false},
		{"- 1", 0, false}, {"-\t1", 0, false}, {" -1", -1, true},
	} {
		r := NewReader(c.in)
		got := r.Int()
		if ok := r.End(); ok != c.ok || (ok && got != c.want) {
			t.Errorf("Int(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	r := NewReader("18446744073709551615")
	if got := r.Uint(); !r.End() || got != 1<<64-1 {
		t.Errorf("Uint(max) = %d, %v", got, r.OK())
	}
	r = NewReader("18446744073709551616")
	if r.Uint(); r.End() {
		t.Error("Uint took 2^64")
	}
}

func TestObjectsAndArrays(t *testing.T) {
	r := NewReader(` { "a" : [ 1 , 2 ] , "b" : { } , "c" : [ ] } `)
	var sum int64
	var keys []string
	r.Object(func(key string) {
		keys = append(keys, key)
		switch key {
		case "a":
			r.Array(func() { sum += r.Int() })
		case "b":
			r.Object(func(string) { r.Fail() })
		case "c":
			r.Array(func() { r.Fail() })
		}
	})
	if !r.End() || sum != 3 || strings.Join(keys, ",") != "a,b,c" {
		t.Fatalf("read %v %d (ok %v)", keys, sum, r.OK())
	}
	for _, bad := range []string{`{"a":1,}`, `{"a":1`, `[1,2`, `{"a" 1}`, `{"a":1}x`, `{a:1}`, `[1 2]`} {
		r := NewReader(bad)
		if bad[0] == '{' {
			r.Object(func(string) { r.Int() })
		} else {
			r.Array(func() { r.Int() })
		}
		if r.End() {
			t.Errorf("%s read as good", bad)
		}
	}
}

func TestFieldsTakesEachKnownKeyOnce(t *testing.T) {
	keys := []string{"a", "b"}
	for in, ok := range map[string]bool{`{"b":2,"a":1}`: true, `{}`: true, `{"a":1,"a":2}`: false, `{"a":1,"c":3}`: false, `{"A":1}`: false} {
		r := NewReader(in)
		var got [2]int64
		r.Fields(keys, func(i int) { got[i] = r.Int() })
		if r.End() != ok || (ok && in != "{}" && got != [2]int64{1, 2}) {
			t.Errorf("%s: read %v, ok %v; want ok %v", in, got, r.OK(), ok)
		}
	}
}
