package logstore

import (
	"bytes"
	"fmt"
	"io"
)

// RawLine is a stored line as the JSON object appendLine wrote, without its
// newline: {"seq":…,"stream":…,"text":…,"time_ms":…}.
type RawLine struct {
	Seq  uint64
	JSON []byte
}

// ReadJSON is Read for a reader that passes lines on as JSON (a log
// viewer's stream): a line in the shape appendLine writes is handed over as
// stored, its seq read from its head, instead of decoded and encoded again
// — reading a file back was a viewer's costliest path, and a viewer that
// falls behind the live lines takes it for every line. Any other line is
// decoded and written again in that shape.
func (s *Store) ReadJSON(r Ref, after uint64, limit int) ([]RawLine, error) {
	if limit <= 0 {
		limit = 1000
	}
	if s.archive != nil {
		lines, err := s.readMerged(r, after, limit)
		out := make([]RawLine, len(lines))
		for i := range lines {
			out[i] = RawLine{Seq: lines[i].Seq, JSON: trimNewline(appendLine(nil, &lines[i]))}
		}
		return out, err
	}
	f, err := s.openAfter(r, after)
	if f == nil || err != nil {
		return nil, err
	}
	defer f.Close()
	out, err := scanRaw(f, after, limit)
	if err != nil {
		return out, fmt.Errorf("logstore: read %s: %w", r, err)
	}
	return out, nil
}

// scanRaw is scanLines for ReadJSON. It reads the file in chunks and hands
// over lines in place: a chunk is never written again once a line in it
// is handed over, and a line cut by a chunk's end moves to the next one.
// Only complete lines (with their newline) are read.
func scanRaw(rd io.Reader, after uint64, limit int) ([]RawLine, error) {
	var out []RawLine
	buf := make([]byte, 0, rawChunk)
	for len(out) < limit {
		if len(buf) == cap(buf) { // the rest is part of one line
			if len(buf) >= tailBytes {
				return out, fmt.Errorf("a stored line is longer than %d bytes", tailBytes)
			}
			next := make([]byte, len(buf), max(rawChunk, 2*len(buf)))
			copy(next, buf)
			buf = next
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		for len(out) < limit {
			end := bytes.IndexByte(buf, '\n')
			if end < 0 {
				break
			}
			b := buf[:end:end]
			buf = buf[end+1:]
			if len(b) == 0 || b[len(b)-1] != '}' {
				return out, nil // a torn line: nothing after it is complete
			}
			seq, ok := storedShape(b)
			if !ok {
				l, err := decodeLine(b)
				if err != nil {
					return out, err
				}
				seq, b = l.Seq, trimNewline(appendLine(nil, &l))
			}
			if seq > after {
				out = append(out, RawLine{Seq: seq, JSON: b})
			}
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// rawChunk is how much of a file scanRaw reads at a time.
const rawChunk = 64 << 10

func trimNewline(b []byte) []byte { return b[:len(b)-1] }

// storedShape reads the seq of a line that has appendLine's shape at both
// ends — {"seq":N,"stream":"…","time_ms":N} — without reading its text.
// The middle is as appendLine encoded it when the line was stored.
func storedShape(b []byte) (uint64, bool) {
	seq, err := seqOf(b)
	if err != nil {
		return 0, false
	}
	rest := b[len(seqPrefix):]
	i := bytes.IndexByte(rest, ',') // seqOf parsed the digits before it
	if (i > 1 && rest[0] == '0') || !bytes.HasPrefix(rest[i:], []byte(`,"stream":"`)) {
		return 0, false // a leading zero is not JSON
	}
	// The tail: ,"time_ms":-?digits}
	j := len(b) - 1 // the closing brace
	k := j
	for k > 0 && b[k-1] >= '0' && b[k-1] <= '9' {
		k--
	}
	if k == j {
		return 0, false
	}
	if b[k-1] == '-' {
		k--
	}
	if !bytes.HasSuffix(b[:k], []byte(`","time_ms":`)) || k-len(`","time_ms":`) < len(seqPrefix)+i+len(`,"stream":"`) {
		return 0, false
	}
	return seq, true
}
