package storage

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestKeysAndMeta(t *testing.T) {
	for _, key := range []string{"a", "a/b", "caches/main/go-1a2b.tar", "x=1,y@2~z+", ".hidden/..x", strings.Repeat("k", MaxKeyBytes)} {
		if err := CheckKey(key); err != nil {
			t.Errorf("%q: %v", key, err)
		}
	}
	for _, key := range []string{"", "/a", "a/", "a//b", ".", "..", "a/../b", "a b", "a#b", `a\b`, "ä", "a\tb", strings.Repeat("k", MaxKeyBytes+1)} {
		if err := CheckKey(key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%q accepted: %v", key, err)
		}
	}
	for _, p := range []string{"", "a/", "a/b", "a/b-"} {
		if err := CheckPrefix(p); err != nil {
			t.Errorf("prefix %q: %v", p, err)
		}
	}
	if err := CheckPrefix("/"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("prefix /: %v", err)
	}
	if err := CheckMeta(Meta{"a": "1", "created-at": FormatTime(time.Now()), "x9": "a b"}); err != nil {
		t.Error(err)
	}
	for _, m := range []Meta{{"": "x"}, {"A": "x"}, {"-a": "x"}, {"a.b": "x"}, {"a": "x\n"}, {"a": "x "}, {"a": "ü"},
		{"a": strings.Repeat("v", MaxMetaBytes)}} {
		if err := CheckMeta(m); !errors.Is(err, ErrInvalidMeta) {
			t.Errorf("%q accepted: %v", m, err)
		}
	}
}

func TestFreshAndTimes(t *testing.T) {
	now := time.Date(2026, 5, 6, 7, 8, 9, 10, time.FixedZone("x", 3600))
	in := Meta{"k": "v"}
	m := Fresh(in, now)
	if len(in) != 1 || m["k"] != "v" || m[MetaCreatedAt] != "2026-05-06T06:08:09.00000001Z" || m[MetaLastAccessedAt] != m[MetaCreatedAt] {
		t.Fatalf("Fresh: %v (input now %v)", m, in)
	}
	if at, err := ParseTime(m[MetaCreatedAt]); err != nil || !at.Equal(now) {
		t.Fatalf("ParseTime: %v %v", at, err)
	}
}
