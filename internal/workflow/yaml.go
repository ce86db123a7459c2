package workflow

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// Limits of the YAML front end. They bound the work a stranger's file can
// cause: the server parses workflow files from any repository it serves.
const (
	// MaxFileSize is the largest workflow file accepted (1 MiB).
	MaxFileSize = 1 << 20
	// MaxDepth bounds the nesting of mappings and lists; the deepest real
	// workflow shape (jobs.<id>.resources.requests.memory) is six levels.
	MaxDepth = 32
)

// parser walks one file's YAML nodes, collecting every error it finds.
type parser struct {
	file      string
	data      []byte
	lineStart []int // byte offset at which each line starts
	errs      ErrorList
	stopped   bool      // MaxErrors reached
	sites     []site    // expressions to type-check once the workflow is known
	w         *Workflow // the workflow being built
}

func newParser(file string, data []byte) *parser {
	p := &parser{file: file, data: data, lineStart: []int{0}}
	for i, b := range data {
		if b == '\n' {
			p.lineStart = append(p.lineStart, i+1)
		}
	}
	return p
}

// errorAt records an error at a 1-based line and column.
func (p *parser) errorAt(line, col int, format string, args ...any) {
	if p.stopped {
		return
	}
	if len(p.errs) >= MaxErrors {
		p.errs = append(p.errs, &Error{File: p.file, Line: line, Col: col, Msg: fmt.Sprintf("too many errors (%d); stopping", MaxErrors)})
		p.stopped = true
		return
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: max(line, 1), Col: max(col, 1), Msg: fmt.Sprintf(format, args...)})
}

// errorf records an error at a node.
func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	line, col := 1, 1
	if n != nil {
		line, col = n.Line, n.Column
	}
	p.errorAt(line, col, format, args...)
}

// position converts a byte offset into a 1-based line and rune column.
func (p *parser) position(off int) (line, col int) {
	off = min(max(off, 0), len(p.data))
	i, found := slices.BinarySearch(p.lineStart, off)
	if !found {
		i-- // off lies inside line i-1
	}
	start := p.lineStart[i]
	return i + 1, utf8.RuneCount(p.data[start:off]) + 1
}

// decode checks the raw bytes and parses them into the root mapping node,
// or records why it cannot and returns nil.
func (p *parser) decode() *yaml.Node {
	if len(p.data) > MaxFileSize {
		p.errorAt(1, 1, "the file is %d bytes; a workflow file may be at most 1 MiB", len(p.data))
		return nil
	}
	if !utf8.Valid(p.data) {
		off := firstInvalidUTF8(p.data)
		line, col := p.position(off)
		p.errorAt(line, col, "invalid UTF-8 at byte offset %d; workflow files must be UTF-8 text", off)
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(p.data))
	var doc yaml.Node
	if err := safeDecode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorAt(1, 1, "the file is empty; a workflow needs at least `on:` and `jobs:`")
		} else {
			p.yamlError(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := safeDecode(dec, &extra); err == nil {
		p.errorf(&extra, "a workflow file holds one YAML document; remove the second one (after ---)")
		return nil
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err)
		return nil
	}
	if !p.scan(&doc) {
		return nil
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" {
		p.errorAt(1, 1, "the file is empty; a workflow needs at least `on:` and `jobs:`")
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "a workflow file is a mapping of keys (name, on, jobs, …), not %s", describe(root))
		return nil
	}
	return root
}

// safeDecode shields kiln from a panic inside the YAML library: a file that
// triggers one is reported as unparseable, never crashes the server.
func safeDecode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: the YAML parser failed on this file (%v)", r)
		}
	}()
	return dec.Decode(n)
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns a YAML library error into a positioned sentence, with a
// hint for the mistakes people make most.
//
// The library reports scanner errors at their line, but parser errors
// ("did not find expected …") at the 0-based line where the enclosing
// mapping or list starts; those get one added and say so.
func (p *parser) yamlError(err error) {
	msg := err.Error()
	line := 0
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	if tl, tc, ok := p.indentTab(); ok {
		p.errorAt(tl, tc, "a tab is used for indentation; YAML indents with spaces only")
		return
	}
	hint := ""
	switch {
	case parserProblems[msg]:
		line++
		hint = " in the mapping or list that starts here (check the indentation and the brackets below this line)"
	case msg == "mapping values are not allowed in this context":
		hint = " (a value containing \": \" must be quoted)"
	case strings.Contains(msg, "cannot start any token"):
		hint = " (a value starting with @, ` or % must be quoted)"
	}
	p.errorAt(max(line, 1), 1, "invalid YAML: %s%s", msg, hint)
}

// parserProblems are the YAML library's parser (not scanner) errors.
var parserProblems = map[string]bool{
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
}

// indentTab finds the first line whose indentation contains a tab. It is
// only consulted when YAML parsing failed: tabs inside values are fine.
func (p *parser) indentTab() (line, col int, ok bool) {
	for i, start := range p.lineStart {
		for j := start; j < len(p.data); j++ {
			c := p.data[j]
			if c == '\t' {
				// A tab followed by only blanks or a comment is harmless.
				rest := bytes.TrimLeft(p.data[j:lineEnd(p.data, j)], " \t")
				if len(rest) == 0 || rest[0] == '#' {
					break
				}
				return i + 1, j - start + 1, true
			}
			if c != ' ' {
				break
			}
		}
	}
	return 0, 0, false
}

func lineEnd(data []byte, from int) int {
	if i := bytes.IndexByte(data[from:], '\n'); i >= 0 {
		return from + i
	}
	return len(data)
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// scan rejects, over the whole tree and before any meaning is given to it,
// what kiln does not accept in any position: aliases (a billion-laughs file
// fails here at once, without expanding anything), merge keys, custom tags,
// and nesting deeper than MaxDepth. It reports whether the tree is usable.
func (p *parser) scan(doc *yaml.Node) bool {
	type item struct {
		n     *yaml.Node
		depth int
	}
	ok := true
	stack := []item{{doc, 0}}
	for len(stack) > 0 && !p.stopped {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := it.n
		switch {
		case n.Kind == yaml.AliasNode:
			p.errorf(n, "YAML aliases (*%s) are not supported; repeat the value instead", n.Value)
			ok = false
			continue
		case it.depth > MaxDepth:
			p.errorf(n, "the file nests deeper than %d levels", MaxDepth)
			return false
		case n.Kind == yaml.ScalarNode && n.Tag != "" && !knownTags[n.Tag]:
			p.errorf(n, "YAML tag %s is not supported", n.Tag)
			ok = false
		case n.Kind == yaml.MappingNode && n.Tag != "!!map" || n.Kind == yaml.SequenceNode && n.Tag != "!!seq":
			p.errorf(n, "YAML tag %s is not supported", n.Tag)
			ok = false
		}
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
					p.errorf(k, "YAML merge keys (<<) are not supported; repeat the keys instead")
					ok = false
				}
			}
		}
		for i := len(n.Content) - 1; i >= 0; i-- {
			stack = append(stack, item{n.Content[i], it.depth + 1})
		}
	}
	return ok && !p.stopped
}

var knownTags = map[string]bool{"!!str": true, "!!int": true, "!!float": true, "!!bool": true, "!!null": true, "!!merge": true, "!!timestamp": true, "!!binary": false}

// describe names a node's kind for "expected X, found Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "nothing (null)"
		case "!!bool":
			return "true/false"
		case "!!int", "!!float":
			return "a number"
		}
		return "a string"
	}
	return "an unexpected YAML node"
}
