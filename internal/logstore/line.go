package logstore

import (
	"bytes"
	"fmt"
	"strconv"

	gojson "github.com/goccy/go-json"

	"github.com/kilnci/kiln/internal/jsonwire"
)

// Line is one stored log line.
type Line struct {
	Seq    uint64 `json:"seq"`
	Stream string `json:"stream"`
	Text   string `json:"text"`
	TimeMS int64  `json:"time_ms"`
}

// appendLine appends l as one JSON line. It is hand-written because it runs
// for every line kiln stores; the output is plain JSON that any reader (and
// decodeLine) parses.
func appendLine(b []byte, l *Line) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, l.Seq, 10)
	b = append(b, `,"stream":`...)
	b = jsonwire.AppendString(b, l.Stream)
	b = append(b, `,"text":`...)
	b = jsonwire.AppendString(b, l.Text)
	b = append(b, `,"time_ms":`...)
	b = strconv.AppendInt(b, l.TimeMS, 10)
	return append(b, "}\n"...)
}

// decodeLine parses one stored line (without its newline): by hand for
// the lines appendLine writes, with a full decoder for anything else (a
// file written by hand, say).
func decodeLine(b []byte) (Line, error) {
	if l, ok := readLine(string(b)); ok {
		return l, nil
	}
	var l Line
	if err := gojson.Unmarshal(b, &l); err != nil {
		return Line{}, fmt.Errorf("decode log line %.60q: %w", b, err)
	}
	return l, nil
}

// lineKeys are a stored line's keys, in readLine's order.
var lineKeys = []string{"seq", "stream", "text", "time_ms"}

// readLine is decodeLine's fast road: one allocation (the caller's string)
// per line, which the text shares.
func readLine(s string) (Line, bool) {
	var l Line
	r := jsonwire.NewReader(s)
	r.Fields(lineKeys, func(i int) {
		switch i {
		case 0:
			l.Seq = r.Uint()
		case 1:
			l.Stream = r.String()
		case 2:
			l.Text = r.String()
		case 3:
			l.TimeMS = r.Int()
		}
	})
	return l, r.End()
}

// lastSeq returns the seq of the last complete line in data, and the length
// of data up to and including that line (anything after it is a torn write).
func lastSeq(data []byte) (seq uint64, complete int, err error) {
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return 0, 0, nil
	}
	start := bytes.LastIndexByte(data[:end], '\n') + 1
	l, err := decodeLine(data[start:end])
	if err != nil {
		return 0, 0, err
	}
	return l.Seq, end + 1, nil
}

// goodPrefix reads data line by line from its start and returns the seq of
// the last line of its good prefix — complete lines that decode and are
// numbered in increasing order, as the store writes them — the prefix's
// length in bytes, and whether it holds a line at all. Whatever follows is
// a torn or garbled write. partial says data starts inside a line (the
// window of a longer file): that first piece is skipped, not judged.
func goodPrefix(data []byte, partial bool) (seq uint64, n int, found bool) {
	if partial {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return 0, 0, false
		}
		n = i + 1
	}
	for n < len(data) {
		end := bytes.IndexByte(data[n:], '\n')
		if end < 0 {
			break // torn: no newline
		}
		l, err := decodeLine(data[n : n+end])
		if err != nil || l.Seq <= seq {
			break
		}
		seq, found = l.Seq, true
		n += end + 1
	}
	return seq, n, found
}
