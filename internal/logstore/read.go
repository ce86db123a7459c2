package logstore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Read returns up to limit lines of a step's log with seq > after, in order.
// A missing log reads as empty. It reads the file as written so far, so it
// works while the step is live; with an Archive it merges the file with
// the segments shipped there (merge), so a server with no file, or with
// only part of the step (the agent was connected to another server for a
// while), reads every line, once.
func (s *Store) Read(r Ref, after uint64, limit int) ([]Line, error) {
	if limit <= 0 {
		limit = 1000
	}
	if s.archive != nil {
		return s.readMerged(r, after, limit)
	}
	f, err := s.openAfter(r, after)
	if f == nil || err != nil {
		return nil, err
	}
	defer f.Close()
	out, err := scanLines(f, after, limit, nil)
	if err != nil {
		return out, fmt.Errorf("logstore: read %s: %w", r, err)
	}
	return out, nil
}

// readMerged is Read with an Archive.
func (s *Store) readMerged(r Ref, after uint64, limit int) ([]Line, error) {
	p, err := s.path(r)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	if f != nil {
		defer f.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), archiveTimeout)
	defer cancel()
	segs, err := s.segments(ctx, r)
	if err != nil {
		return nil, err
	}
	out, err := s.merge(ctx, f, segs, after, limit)
	if err != nil {
		return out, fmt.Errorf("logstore: read %s: %w", r, err)
	}
	return out, nil
}

// openAfter opens a step's file at its first line with seq > after; a
// missing file is (nil, nil).
func (s *Store) openAfter(r Ref, after uint64) (*os.File, error) {
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
	if after > 0 {
		off, err := seekAfter(f, after)
		if err == nil {
			_, err = f.Seek(off, io.SeekStart)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("logstore: read %s: %w", r, err)
		}
	}
	return f, nil
}

// scanLines appends to out the lines of rd with seq > after until out holds
// limit lines; a line still being written ends the scan.
func scanLines(rd io.Reader, after uint64, limit int, out []Line) ([]Line, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), tailBytes)
	for len(out) < limit && sc.Scan() {
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
	return out, sc.Err()
}

// Last returns the highest seq stored for a step, from its file or else
// the archive (0 if none), without opening the step for writing.
func (s *Store) Last(r Ref) (uint64, error) {
	s.mu.Lock()
	e, ok := s.open[r]
	s.mu.Unlock()
	if ok {
		sf := e.Value.(*stepFile)
		sf.mu.Lock()
		last, live := sf.last, sf.f != nil
		sf.mu.Unlock()
		if live && (s.archive == nil || last > 0) {
			return last, nil
		}
	}
	p, err := s.path(r)
	if err != nil {
		return 0, err
	}
	// A file that starts at the step's first line may still lack the
	// last ones (the agent went on with another server): with an archive
	// the highest of both counts.
	var local uint64
	if f, err := os.Open(p); err == nil {
		local, err = tailSeq(f)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("logstore: %w", err)
		}
	}
	if s.archive == nil {
		return local, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), archiveTimeout)
	defer cancel()
	shipped, err := s.archivedLast(ctx, r)
	return max(local, shipped), err
}

// tailSeq reads the seq of a file's last complete line, reading backwards
// from the end in growing windows (most lines are short).
func tailSeq(f *os.File) (uint64, error) {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, err
	}
	for window := int64(4096); ; window *= 4 {
		off := max(st.Size()-min(window, tailBytes), 0)
		data := make([]byte, st.Size()-off)
		if _, err := f.ReadAt(data, off); err != nil && err != io.EOF {
			return 0, err
		}
		end := bytes.LastIndexByte(data, '\n')
		if off == 0 || window >= tailBytes || (end > 0 && bytes.LastIndexByte(data[:end], '\n') >= 0) {
			seq, _, err := lastSeq(data)
			return seq, err
		}
	}
}

// Shared reports whether logs are shipped to an archive that other servers
// read: a viewer there sees live lines only by reading it again.
func (s *Store) Shared() bool { return s.archive != nil }

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
