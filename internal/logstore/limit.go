package logstore

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// The server keeps the executor's cap on a step attempt's log itself, so
// an agent-token holder cannot write more than an honest agent would
// (B104). Output lines (stdout, stderr) count their text and a newline, as
// the executor counts them, against MaxStepBytes; the executor's own system
// lines (retries, checkout, its truncation notice) count against a
// separate small allowance, so an honest agent never reaches the server's
// cap. The first line over either is replaced by one system line saying
// so, and every later line of that step attempt is dropped (and still
// acknowledged: the agent must not replay it).
const (
	DefaultMaxStepBytes = 10 << 20 // the executor's DefaultMaxLogBytesPerStep
	systemAllowance     = 1 << 20
	// TruncatedByServer starts the marker line.
	TruncatedByServer = "[kiln] log truncated by the server: "
	streamSystem      = "system"
)

// stepBudget is what a step attempt's log has used of the cap.
type stepBudget struct {
	output, system int64
	truncated      bool
}

// admit returns the lines of a batch that fit, with the marker line in
// place of the first that does not; once the cap is reached it admits
// nothing. lines is not modified.
func (b *stepBudget) admit(lines []Line, max int64) []Line {
	if b.truncated {
		return nil
	}
	for k := range lines {
		l := &lines[k]
		size := int64(len(l.Text)) + 1
		used, limit := &b.output, max
		if l.Stream == streamSystem {
			used, limit = &b.system, systemAllowance
		}
		if *used+size > limit {
			b.truncated = true
			marker := Line{Seq: l.Seq, Stream: streamSystem, TimeMS: l.TimeMS, Text: TruncatedByServer + fmt.Sprintf(
				"this step attempt's output passed %d MiB; the server stores no more of it", max>>20)}
			return append(lines[:k:k], marker)
		}
		*used += size
	}
	return lines
}

// count adds a stored line, when a file is reopened.
func (b *stepBudget) count(l Line) {
	if l.Stream == streamSystem {
		if strings.HasPrefix(l.Text, TruncatedByServer) {
			b.truncated = true
		}
		b.system += int64(len(l.Text)) + 1
		return
	}
	b.output += int64(len(l.Text)) + 1
}

// recount reads what a reopened step file already used of the cap. Files
// are reopened rarely (after a restart, or when more than MaxOpenFiles
// steps log at once) and hold at most the cap, so reading one through is
// cheap.
func recount(f *os.File) (stepBudget, error) {
	var b stepBudget
	sc := bufio.NewScanner(io.NewSectionReader(f, 0, 1<<62))
	sc.Buffer(make([]byte, 64<<10), tailBytes)
	for sc.Scan() {
		l, err := decodeLine(sc.Bytes())
		if err != nil {
			return b, err
		}
		b.count(l)
	}
	return b, sc.Err()
}
