package workflow

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Pattern is one entry of a branch, path or tag filter, compiled at parse
// time so a workflow that lints clean never fails to match later.
//
//   - a glob ("main", "release/*", "**/*.go") matches the whole name: "*"
//     matches within one path segment, "**" across segments, {a,b} either;
//   - "re:" followed by an RE2 regular expression matches when the
//     expression is found anywhere in the name (anchor it with ^ and $ to
//     match the whole name), and runs in linear time;
//   - a leading "!" makes the pattern an exclusion (see the trigger package
//     for how lists combine them).
type Pattern struct {
	Source string // as written, including "!" and "re:"
	Negate bool
	Glob   string         // the glob, without "!"; "" for a regexp
	Regexp *regexp.Regexp // nil for a glob
}

// MaxPatternLen bounds one pattern.
const MaxPatternLen = 1024

// ParsePattern compiles one filter pattern.
func ParsePattern(src string) (Pattern, error) {
	p := Pattern{Source: src}
	body := src
	if strings.HasPrefix(body, "!") {
		p.Negate, body = true, body[1:]
	}
	switch {
	case len(src) > MaxPatternLen:
		return p, fmt.Errorf("pattern is longer than %d characters", MaxPatternLen)
	case strings.TrimSpace(body) == "":
		return p, fmt.Errorf("pattern %q is empty", src)
	case strings.HasPrefix(body, "re:"):
		re, err := regexp.Compile(body[3:])
		if err != nil {
			return p, fmt.Errorf("%q is not a valid regular expression: %s", body[3:], regexpProblem(err))
		}
		p.Regexp = re
	default:
		if !doublestar.ValidatePattern(body) {
			return p, fmt.Errorf("%q is not a valid glob (check its [ ] and { } pairs)", body)
		}
		p.Glob = body
	}
	return p, nil
}

func regexpProblem(err error) string {
	return strings.TrimPrefix(err.Error(), "error parsing regexp: ")
}

// Match reports whether name matches the pattern, ignoring Negate.
func (p Pattern) Match(name string) bool {
	if p.Regexp != nil {
		return p.Regexp.MatchString(name)
	}
	ok, err := doublestar.Match(p.Glob, name)
	return ok && err == nil
}

func (p Pattern) String() string { return p.Source }

// MarshalJSON renders the pattern as written.
func (p Pattern) MarshalJSON() ([]byte, error) { return json.Marshal(p.Source) }

// Patterns is a filter list: branches, paths or tags.
type Patterns []Pattern

// Sources returns the patterns as written.
func (ps Patterns) Sources() []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Source
	}
	return out
}

// MarshalJSON renders the list as written ([] when empty).
func (ps Patterns) MarshalJSON() ([]byte, error) { return json.Marshal(ps.Sources()) }

func (ps Patterns) String() string { return strings.Join(ps.Sources(), ", ") }
