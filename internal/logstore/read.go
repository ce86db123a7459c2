package logstore

import (
	"bufio"
	"errors"
	"fmt"
	"os"
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
