package executor

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

func TestMask(t *testing.T) {
	t.Parallel()
	m := newMasker([]string{"password123", "abcdef", "defghi", "xy", "   ", "multi-one\r\nmulti-two", "a b&c=d"})
	cases := map[string]string{
		"nothing here":                   "nothing here",
		"password123":                    "***",
		"my password123 and password123": "my *** and ***",
		"abcdefghi":                      "***", // overlapping secrets: nothing of either shows
		"xyz xy":                         "xyz xy",
		"   spaces   ":                   "   spaces   ",
		"multi-one / multi-two":          "*** / ***",
		"encoded: " + base64.StdEncoding.EncodeToString([]byte("password123")): "encoded: ***=",
		"query: " + url.QueryEscape("a b&c=d"):                                 "query: ***",
		"path: " + url.PathEscape("a b&c=d"):                                   "path: ***",
		"password123password123":                                               "***",
	}
	for in, want := range cases {
		if got := m.mask(in); got != want {
			t.Errorf("mask(%q) = %q, want %q", in, got, want)
		}
	}
	var empty *masker
	if empty.mask("x") != "x" || newMasker(nil).mask("abc") != "abc" {
		t.Error("an empty masker changed text")
	}
}

func TestMaskCut(t *testing.T) {
	t.Parallel()
	m := newMasker([]string{"SECRET"})
	s := strings.Repeat("a", 8) + "SECRET" + strings.Repeat("b", 8)
	for limit := 1; limit < len(s); limit++ {
		cut := m.cut(s, limit)
		if cut <= 0 {
			t.Fatalf("limit %d: cut %d", limit, cut)
		}
		a, b := m.mask(s[:cut]), m.mask(s[cut:])
		if strings.Contains(a+"|"+b, "SEC") || strings.Contains(a+"|"+b, "RET") {
			t.Errorf("limit %d: pieces %q %q show part of the secret", limit, a, b)
		}
	}
	// Secrets back to back longer than the limit: cut after them.
	s = "SECRETSECRETSECRET tail"
	cut := m.cut(s, 4)
	if a, b := m.mask(s[:cut]), m.mask(s[cut:]); a != "***" || (b != "*** tail" && b != " tail") {
		t.Errorf("cut %d: %q | %q", cut, a, b)
	}
}

// FuzzMask: whatever the text, no secret survives masking, and text
// without a secret is left alone.
// Proves B58 (docs/behaviours.md).
func FuzzMask(f *testing.F) {
	f.Add("token-123", "abc token-123 def", 10)
	f.Add("aaa", "aaaaaaa", 2)
	f.Add("x\ny", "x y", 1)
	f.Add("s3cr3t", "s3cs3cr3tr3t", 4)
	f.Fuzz(func(t *testing.T, secret, text string, limit int) {
		m := newMasker([]string{secret})
		got := m.mask(text)
		for _, v := range m.values {
			if strings.Contains(got, v) && !strings.Contains(maskText, v) && !strings.Contains(strings.ReplaceAll(got, maskText, "\x00"), v) {
				t.Fatalf("mask(%q) = %q still shows %q", text, got, v)
			}
		}
		if !m.containsAny(text) && got != text {
			t.Fatalf("mask changed %q to %q", text, got)
		}
		if limit < 1 || len(text) <= limit {
			return
		}
		cut := m.cut(text, limit)
		if cut <= 0 || cut > len(text) {
			t.Fatalf("cut(%q, %d) = %d", text, limit, cut)
		}
	})
}
