package logstore

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"

	"github.com/kilnci/kiln/internal/storage"
)

// A step's lines may be spread over several servers: the agent sends them
// to the server it is connected to, and moves to another when that one
// goes away — or comes back. Each server's file holds the lines it was
// sent; the archive holds what each shipped, segments named by their
// first and last seq, sorted so. A server killed holding lines it had not
// shipped ships them when it restarts, as a segment that falls between the
// others (Store.ship). So a reader merges: the segments in key order and
// the local file, each a stream of increasing seqs, taking the lowest next
// seq of all and each seq once.

// lineSource is one stream of a step's lines in increasing seq order: the
// local file or one segment.
type lineSource struct {
	sc   *bufio.Scanner
	body io.Closer // a segment's, closed after the read; nil for the file
	head Line
	done bool
	err  error
}

func newLineSource(rd io.Reader, body io.Closer) *lineSource {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), tailBytes)
	src := &lineSource{sc: sc, body: body}
	src.next()
	return src
}

// next moves to the stream's next line; a line still being written (the
// file's last) ends the stream.
func (src *lineSource) next() {
	if src.done {
		return
	}
	if !src.sc.Scan() {
		src.done, src.err = true, src.sc.Err()
		return
	}
	b := src.sc.Bytes()
	if len(b) == 0 || b[len(b)-1] != '}' {
		src.done = true
		return
	}
	l, err := decodeLine(b)
	if err != nil {
		src.done, src.err = true, err
		return
	}
	src.head = l
}

// skip moves past every line with seq ≤ after.
func (src *lineSource) skip(after uint64) {
	for !src.done && src.head.Seq <= after {
		src.next()
	}
}

// merge returns up to limit lines with seq > after from the file f (nil:
// none) and the segments segs (in key order), each seq once, in order. A
// segment is fetched only once the merge reaches its first seq, and not
// at all when the file holds its very lines (fileHolds), so the server
// the agent is connected to reads its own file, not the archive.
func (s *Store) merge(ctx context.Context, f *os.File, segs []segment, after uint64, limit int) ([]Line, error) {
	var active []*lineSource
	defer func() {
		for _, src := range active {
			if src.body != nil {
				src.body.Close()
			}
		}
	}()
	if f != nil {
		off, err := seekAfter(f, after)
		if err != nil {
			return nil, err
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
		active = append(active, newLineSource(f, nil))
	}
	pending := segs[:0:0]
	for _, g := range segs {
		if g.last > after {
			pending = append(pending, g)
		}
	}
	var out []Line
	cur := after
	for len(out) < limit {
		var best *lineSource
		for _, src := range active {
			src.skip(cur)
			if src.err != nil {
				return out, src.err
			}
			if !src.done && (best == nil || src.head.Seq < best.head.Seq) {
				best = src
			}
		}
		// A segment starting at or below the lowest next seq may hold it
		// (or a lower one): open it before choosing.
		if len(pending) > 0 && (best == nil || pending[0].first <= best.head.Seq) {
			g := pending[0]
			pending = pending[1:]
			if f != nil && fileHolds(f, g) {
				continue
			}
			body, _, err := s.archive.Get(ctx, g.key)
			if errors.Is(err, storage.ErrNotFound) {
				continue // deleted by retention meanwhile
			}
			if err != nil {
				return out, err
			}
			active = append(active, newLineSource(body, body))
			continue
		}
		if best == nil {
			break
		}
		out = append(out, best.head)
		cur = best.head.Seq
	}
	return out, nil
}

// fileHolds reports whether the file holds every line of segment g: its
// lines from seq g.first up to g.last take exactly the segment's bytes.
// Both are the same agent's lines, written the same way, and a shipped
// segment holds every line of its range (denseRun), so a file lacking one
// of them would be shorter there.
func fileHolds(f *os.File, g segment) bool {
	if g.size <= 0 || g.first == 0 {
		return false
	}
	st, err := f.Stat()
	if err != nil {
		return false
	}
	from, err := seekAfter(f, g.first-1)
	if err != nil {
		return false
	}
	if _, seq, ok, err := lineAt(f, from, st.Size()); err != nil || !ok || seq != g.first {
		return false
	}
	to, err := seekAfter(f, g.last)
	if err != nil || to-from != g.size {
		return false
	}
	nl := make([]byte, 1)
	_, err = f.ReadAt(nl, to-1)
	return err == nil && nl[0] == '\n'
}
