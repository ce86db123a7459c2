package storage

import (
	"fmt"
	"strings"
)

// Limits every backend enforces, so an object that one accepts the others
// accept too (they are S3's).
const (
	MaxKeyBytes  = 1024 // a key's length
	MaxMetaBytes = 2048 // the sum of a Meta's key and value lengths
)

// CheckKey reports whether key is a valid object key: at most MaxKeyBytes
// of printable ASCII other than `\` and `#`, made of "/"-separated
// segments that are neither empty nor "." or "..". The rules keep every
// key a relative path on any filesystem and a plain S3 key, and leave `#`
// to the filesystem backend's own files. Consumers that build keys from
// names people chose escape them first.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyBytes {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e || c == '\\' || c == '#' {
			return fmt.Errorf("%w %q: byte %#x at %d is not allowed", ErrInvalidKey, key, c, i)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w %q: empty, \".\" or \"..\" segment", ErrInvalidKey, key)
		}
	}
	return nil
}

// CheckPrefix reports whether prefix can start a key: "" or a key with
// an optional trailing "/".
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return CheckKey(strings.TrimSuffix(prefix, "/"))
}

// CheckMeta reports whether m is valid metadata: keys of lower-case
// letters, digits and dashes starting with a letter or digit, values of
// printable ASCII without leading or trailing spaces (an HTTP header
// carries them to S3, which trims spaces), at most MaxMetaBytes in all.
func CheckMeta(m Meta) error {
	total := 0
	for k, v := range m {
		total += len(k) + len(v)
		if k == "" || k[0] == '-' {
			return fmt.Errorf("%w: key %q must start with a letter or digit", ErrInvalidMeta, k)
		}
		for i := 0; i < len(k); i++ {
			if c := k[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%w: key %q may hold only a-z, 0-9 and -", ErrInvalidMeta, k)
			}
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7e {
				return fmt.Errorf("%w: value of %q holds byte %#x", ErrInvalidMeta, k, c)
			}
		}
		if strings.TrimSpace(v) != v {
			return fmt.Errorf("%w: value of %q starts or ends with a space", ErrInvalidMeta, k)
		}
	}
	if total > MaxMetaBytes {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidMeta, total, MaxMetaBytes)
	}
	return nil
}
