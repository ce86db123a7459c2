package executor

import (
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
)

// MinSecretLen is the shortest value the masker hides. Masking a one- or
// two-character value ("1", "on") would blank out half of every log while
// protecting nothing: such a value is guessable anyway.
const MinSecretLen = 3

// maskText replaces each secret occurrence.
const maskText = "***"

// masker hides secret values in log lines. Lines are masked whole, after
// the executor has reassembled them from however many writes produced
// them, so a secret printed in pieces is still one match.
type masker struct {
	values []string // longest first
	maxLen int
}

// newMasker builds a masker for the given secret values. A multi-line
// value is masked line by line (log lines never contain a newline). Each
// value is also masked in its base64 form (the whole encoding without
// padding, and the part that stays the same whatever bytes follow the
// value) and its URL query and path escapings, the forms a script most
// often prints it in by accident.
func newMasker(secrets []string) *masker {
	seen := map[string]bool{}
	m := &masker{}
	add := func(v string) {
		if len(v) < MinSecretLen || strings.TrimSpace(v) == "" || seen[v] {
			return
		}
		seen[v] = true
		m.values = append(m.values, v)
		m.maxLen = max(m.maxLen, len(v))
	}
	for _, s := range secrets {
		for _, line := range strings.Split(s, "\n") {
			line = strings.TrimSuffix(line, "\r")
			add(line)
			// The encoding of whole 3-byte groups does not depend on what
			// follows the value (echo's newline, say); the rest does.
			add(base64.StdEncoding.EncodeToString([]byte(line[:len(line)/3*3])))
			add(strings.TrimRight(base64.StdEncoding.EncodeToString([]byte(line)), "="))
			add(url.QueryEscape(line))
			add(url.PathEscape(line))
		}
	}
	slices.SortFunc(m.values, func(a, b string) int { return len(b) - len(a) })
	return m
}

func (m *masker) empty() bool { return m == nil || len(m.values) == 0 }

// longest is the length of the longest masked value (0 when none).
func (m *masker) longest() int {
	if m == nil {
		return 0
	}
	return m.maxLen
}

// containsAny reports whether s contains any secret.
func (m *masker) containsAny(s string) bool {
	if m.empty() {
		return false
	}
	for _, v := range m.values {
		if strings.Contains(s, v) {
			return true
		}
	}
	return false
}

// mask returns s with every byte that belongs to an occurrence of a secret
// replaced: each run of such bytes becomes one "***". Working on the union
// of all occurrences (rather than replacing secret after secret) means two
// overlapping secrets never leave a piece of either visible.
func (m *masker) mask(s string) string {
	if !m.containsAny(s) {
		return s
	}
	spans := m.spans(s)
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp[0]])
		b.WriteString(maskText)
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// spans returns the merged, sorted [start, end) ranges of s covered by a
// secret occurrence (overlapping occurrences included).
func (m *masker) spans(s string) [][2]int {
	var spans [][2]int
	for _, v := range m.values {
		for i := 0; i+len(v) <= len(s); {
			j := strings.Index(s[i:], v)
			if j < 0 {
				break
			}
			spans = append(spans, [2]int{i + j, i + j + len(v)})
			i += j + 1
		}
	}
	if len(spans) == 0 {
		return nil
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	merged := spans[:1]
	for _, sp := range spans[1:] {
		top := &merged[len(merged)-1]
		if sp[0] <= top[1] {
			top[1] = max(top[1], sp[1])
			continue
		}
		merged = append(merged, sp)
	}
	return merged
}

// cut returns where to split s (len(s) > limit) so that s[:cut] is at most
// limit bytes and no secret occurrence straddles the cut: an occurrence
// that would is moved whole into the next piece. When secrets cover the
// whole first limit bytes, the cut goes after them instead (the piece is
// then longer than limit before masking, but masks down to "***…").
func (m *masker) cut(s string, limit int) int {
	if m.empty() {
		return limit
	}
	window := s[:min(len(s), limit+m.maxLen)]
	spans := m.spans(window)
	cut := limit
	for changed := true; changed; {
		changed = false
		for _, sp := range spans {
			if sp[0] < cut && sp[1] > cut {
				cut = sp[0]
				changed = true
			}
		}
	}
	if cut == 0 {
		return spans[0][1]
	}
	return cut
}
