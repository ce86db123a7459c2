package executor

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// readSize is how much of a pipe is read at once.
const readSize = 64 << 10

// stepLog turns one step's output into numbered, masked, capped batches of
// log lines. Both streams of every attempt of the step share one stepLog,
// so sequence numbers and the cap span the whole step.
type stepLog struct {
	index    int
	em       *emitter
	masker   *masker
	clock    func() time.Time
	maxBytes int64
	maxLine  int
	lines    int
	interval time.Duration

	activity atomic.Int64 // unix nanoseconds of the readers' last progress

	mu        sync.Mutex
	seq       uint64
	batch     []LogLine
	timer     *time.Timer
	armed     bool
	written   int64 // bytes of lines sent
	dropped   int64 // bytes of lines dropped after the cap
	truncated bool
	closed    bool
	errTail   []string // the last stderr lines (masked), for a failure's cause
}

func (e *Execution) newStepLog(index int, m *masker) *stepLog {
	c := e.x.cfg
	return &stepLog{
		index: index, em: e.em, masker: m, clock: c.Clock,
		maxBytes: c.MaxLogBytesPerStep, maxLine: c.MaxLineBytes,
		lines: max(c.BatchLines, 1), interval: c.BatchInterval,
	}
}

// read consumes r until EOF or an error, splitting it into lines. Output
// without a newline is held until a newline, MaxLineBytes or the end of the
// stream, so a secret written in several pieces is masked as one line.
func (l *stepLog) read(r io.Reader, stream string) {
	buf := make([]byte, readSize)
	var partial []byte // an unfinished line carried between reads
	lines := make([]string, 0, 512)
	for {
		n, err := r.Read(buf)
		l.activity.Store(time.Now().UnixNano())
		if n > 0 {
			now := l.clock()
			lines = lines[:0]
			// One string per read; the lines inside it are substrings.
			chunk := string(buf[:n])
			mustMask := l.masker.containsAny(chunk)
			rest := chunk
			for {
				i := strings.IndexByte(rest, '\n')
				if i < 0 {
					break
				}
				seg := rest[:i]
				rest = rest[i+1:]
				if len(partial) > 0 {
					partial = append(partial, seg...)
					lines = l.appendLine(lines, string(partial), true)
					partial = partial[:0]
					continue
				}
				lines = l.appendLine(lines, seg, mustMask)
			}
			if rest != "" {
				partial = append(partial, rest...)
				// Cut an unfinished line only once it is certainly too long
				// (beyond a possible "\r") and a secret that could straddle
				// the cut has fully arrived, so where lines are cut does not
				// depend on how the output was split into writes.
				for len(partial) >= l.maxLine+max(l.masker.longest(), 2) {
					s := string(partial)
					cut := l.masker.cut(s, l.maxLine)
					lines = append(lines, l.masker.mask(s[:cut]))
					partial = append(partial[:0], s[cut:]...)
				}
			}
			l.add(stream, lines, now)
			l.activity.Store(time.Now().UnixNano())
		}
		if err != nil {
			if len(partial) > 0 {
				l.add(stream, l.appendLine(lines[:0], string(partial), true), l.clock())
			}
			return
		}
	}
}

// lastActivity is when a reader last read or handed on output.
func (l *stepLog) lastActivity() time.Time { return time.Unix(0, l.activity.Load()) }

// appendLine masks a complete line (when it may hold a secret), strips a
// trailing carriage return, cuts it if too long, and appends the pieces.
func (l *stepLog) appendLine(lines []string, s string, mayHoldSecret bool) []string {
	s = strings.TrimSuffix(s, "\r")
	for len(s) > l.maxLine {
		cut := l.masker.cut(s, l.maxLine)
		lines = append(lines, l.masker.mask(s[:cut]))
		s = s[cut:]
	}
	if mayHoldSecret {
		s = l.masker.mask(s)
	}
	return append(lines, s)
}

// add numbers lines, applies the cap and batches them.
func (l *stepLog) add(stream string, lines []string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if stream == StreamStderr {
		l.errTail = append(l.errTail, lines...)
		if n := len(l.errTail); n > maxErrTail {
			l.errTail = append(l.errTail[:0], l.errTail[n-maxErrTail:]...)
		}
	}
	for _, text := range lines {
		size := int64(len(text)) + 1
		if l.truncated || l.written+size > l.maxBytes {
			l.truncated = true
			l.dropped += size
			continue
		}
		l.written += size
		l.appendLocked(LogLine{Stream: stream, Text: text, Time: now})
	}
}

// maxErrTail bounds the stderr lines a step log keeps for takeErrTail.
const maxErrTail = 8

// takeErrTail returns the last stderr lines added since the previous call.
func (l *stepLog) takeErrTail() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.errTail
	l.errTail = nil
	return t
}

// notice adds a line of the executor's own (retries, checkout commands) to
// the step's log as a system line. Notices are masked but not counted
// against the cap, and still appear once the step's output has been
// truncated.
func (l *stepLog) notice(format string, args ...any) {
	text := l.masker.mask("[kiln] " + fmt.Sprintf(format, args...))
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.appendLocked(LogLine{Stream: StreamSystem, Text: text, Time: l.clock()})
	}
}

func (l *stepLog) appendLocked(line LogLine) {
	l.seq++
	line.Seq = l.seq
	if l.batch == nil {
		l.batch = make([]LogLine, 0, l.lines)
	}
	l.batch = append(l.batch, line)
	if len(l.batch) >= l.lines {
		l.flushLocked()
		return
	}
	if !l.armed {
		l.armed = true
		if l.timer == nil {
			l.timer = time.AfterFunc(l.interval, l.onTimer)
		} else {
			l.timer.Reset(l.interval)
		}
	}
}

func (l *stepLog) onTimer() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = false
	if len(l.batch) > 0 && !l.closed {
		l.flushLocked()
	}
}

// flushLocked queues the current batch. It may block while the Sink is
// behind: that is the backpressure on the step.
func (l *stepLog) flushLocked() {
	if l.armed {
		l.timer.Stop()
		l.armed = false
	}
	if len(l.batch) == 0 {
		return
	}
	l.em.logs(l.index, l.batch)
	l.batch = nil
}

// flushed sends the current batch and returns the bytes written so far;
// the log stays open.
func (l *stepLog) flushed() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.flushLocked()
	}
	return l.written + l.dropped
}

// close sends what is left, with the truncation line if output was
// dropped, and returns the bytes the step produced.
func (l *stepLog) close() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return l.written + l.dropped
	}
	if l.truncated {
		text := fmt.Sprintf("[kiln] log truncated: step output exceeded %s; %d more bytes not shown",
			formatBytes(l.maxBytes), l.dropped)
		l.appendLocked(LogLine{Stream: StreamSystem, Text: text, Time: l.clock()})
	}
	l.flushLocked()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.closed = true
	return l.written + l.dropped
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
