package logstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Read returns up to limit lines of a step's log with seq > after, in order.
// A missing log reads as empty. It reads the file as written so far, so it
// works while the step is live.
func (s *Store) Read(r Ref, after uint64, limit int) ([]Line, error) {
	p, err := s.path(r)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	defer f.Close()
	if limit <= 0 {
		limit = 1000
	}
	if after > 0 {
		off, err := seekAfter(f, after)
		if err != nil {
			return nil, fmt.Errorf("logstore: read %s: %w", r, err)
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, fmt.Errorf("logstore: read %s: %w", r, err)
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), tailBytes)
	var out []Line
	for sc.Scan() && len(out) < limit {
		b := sc.Bytes()
		if len(b) == 0 || b[len(b)-1] != '}' {
			break // a line still being written
		}
		l, err := decodeLine(b)
		if err != nil {
			return out, err
		}
		if l.Seq > after {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("logstore: read %s: %w", r, err)
	}
	return out, nil
}

// seekAfter returns the offset of the first line with seq > after (or the
// file's end). Lines are stored in increasing seq order, so a binary search
// over byte offsets finds it in O(log n) small reads: a viewer catching up
// page by page on a long log must not rescan the file from its start for
// every page.
func seekAfter(f *os.File, after uint64) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	// The smallest p whose first line (starting at or after p) is missing
	// or has seq > after; the answer is that line's start.
	lo, hi := int64(0), size
	for lo < hi {
		mid := lo + (hi-lo)/2
		start, seq, ok, err := lineAt(f, mid, size)
		if err != nil {
			return 0, err
		}
		if !ok || seq > after {
			hi = mid
		} else {
			lo = start + 1 // every p up to start has the same first line
		}
	}
	start, _, _, err := lineAt(f, lo, size)
	return start, err
}

// seqPrefix is how every stored line starts (appendLine).
var seqPrefix = []byte(`{"seq":`)

// lineAt finds the first line starting at or after p and parses its seq.
// ok is false when there is none, or it is not yet complete enough to have
// a seq.
func lineAt(f *os.File, p, size int64) (start int64, seq uint64, ok bool, err error) {
	start = p
	buf := make([]byte, 4096)
	if p > 0 {
		for pos := p - 1; ; pos += int64(len(buf)) {
			if pos >= size {
				return size, 0, false, nil
			}
			n, err := f.ReadAt(buf, pos)
			if n == 0 && err != nil {
				return 0, 0, false, err
			}
			if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
				start = pos + int64(i) + 1
				break
			}
		}
	}
	head := buf[:32]
	n, err := f.ReadAt(head, start)
	if n == 0 && err != nil && err != io.EOF {
		return 0, 0, false, err
	}
	rest, found := bytes.CutPrefix(head[:n], seqPrefix)
	end := bytes.IndexByte(rest, ',')
	if !found || end < 0 {
		return start, 0, false, nil
	}
	seq, perr := strconv.ParseUint(string(rest[:end]), 10, 64)
	if perr != nil {
		return 0, 0, false, fmt.Errorf("a stored line at offset %d does not start with its seq", start)
	}
	return start, seq, true, nil
}
