package logstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/storage"
)

// Archive is the part of a storage backend a Store ships logs to, so that
// every server sharing the database reads them (docs/storage.md): the
// server the agent is connected to writes a step's log to its own file and
// ships it in segments; any server reads the segments it has no file for.
type Archive interface {
	Put(ctx context.Context, key string, body io.Reader, meta storage.Meta) (storage.Object, error)
	Get(ctx context.Context, key string) (io.ReadCloser, storage.Object, error)
	List(ctx context.Context, prefix, after string, limit int) ([]storage.Object, bool, error)
	Delete(ctx context.Context, key string) error
}

// Defaults of the shipping of logs to an Archive.
const (
	DefaultShipInterval = time.Second
	// segmentBytes bounds one shipped segment, and the buffer the shipper
	// holds: a stored line is below tailBytes, so a segment always holds at
	// least one whole line.
	segmentBytes = tailBytes + 64<<10
	// archiveTimeout bounds one archive request of a reader.
	archiveTimeout = 30 * time.Second
)

// segment is one shipped piece of a step's log: the lines first..last,
// size bytes. A segment this version ships is dense: it holds every line
// of first..last the agent sent (a seq it skipped aside), because the
// shipper cuts a segment where the seqs jump (denseRun); so its range says
// which lines the archive has.
type segment struct {
	key         string
	first, last uint64
	size        int64
}

// ArchivePrefix is the storage key prefix of a run's logs (retention
// deletes it with the run).
func ArchivePrefix(runID string) string { return "logs/" + runID + "/" }

func attemptPrefix(runID, jobID string, epoch int64) string {
	return ArchivePrefix(runID) + jobID + "/e" + strconv.FormatInt(epoch, 10) + "/"
}

// stepPrefix is where a step attempt's segments are: one object per
// segment, named by its first and last seq (zero-padded, so that keys sort
// in log order).
func stepPrefix(r Ref) string {
	return attemptPrefix(r.RunID, r.JobID, r.Epoch) + strconv.Itoa(r.Step) + "/"
}

func segmentKey(r Ref, first, last uint64) string {
	return fmt.Sprintf("%s%020d-%020d", stepPrefix(r), first, last)
}

func parseSegment(key, prefix string) (segment, bool) {
	name, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return segment{}, false
	}
	a, b, ok := strings.Cut(name, "-")
	first, err1 := strconv.ParseUint(a, 10, 64)
	last, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || last < first {
		return segment{}, false
	}
	return segment{key: key, first: first, last: last}, true
}

// segments lists a step attempt's shipped segments in log order.
func (s *Store) segments(ctx context.Context, r Ref) ([]segment, error) {
	prefix := stepPrefix(r)
	var out []segment
	after := ""
	for {
		objs, more, err := s.archive.List(ctx, prefix, after, 1000)
		if err != nil {
			return nil, fmt.Errorf("logstore: list %s: %w", prefix, err)
		}
		for _, o := range objs {
			if seg, ok := parseSegment(o.Key, prefix); ok {
				seg.size = o.Size
				out = append(out, seg)
			}
			after = o.Key
		}
		if !more || len(objs) == 0 {
			return out, nil
		}
	}
}

// archivedLast is the highest seq shipped for r (0 when none).
func (s *Store) archivedLast(ctx context.Context, r Ref) (uint64, error) {
	segs, err := s.segments(ctx, r)
	if err != nil || len(segs) == 0 {
		return 0, err
	}
	return segs[len(segs)-1].last, nil
}

// archivedSteps adds the steps shipped for a job's attempt to set.
func (s *Store) archivedSteps(ctx context.Context, runID, jobID string, epoch int64, set map[int]bool) error {
	prefix := attemptPrefix(runID, jobID, epoch)
	after := ""
	for {
		objs, more, err := s.archive.List(ctx, prefix, after, 1000)
		if err != nil {
			return fmt.Errorf("logstore: list %s: %w", prefix, err)
		}
		for _, o := range objs {
			name, _, _ := strings.Cut(strings.TrimPrefix(o.Key, prefix), "/")
			if i, err := strconv.Atoi(name); err == nil {
				set[i] = true
			}
			after = o.Key
		}
		if !more || len(objs) == 0 {
			return nil
		}
	}
}

// shipState is how far a step's file has been shipped.
type shipState struct {
	seq uint64 // the highest seq shipped
	off int64  // the file offset after it; -1: not yet found
}

// markDirty records that r has lines to ship; closed says the step ended,
// so it is shipped now rather than at the next interval.
func (s *Store) markDirty(r Ref, closed bool) {
	if s.archive == nil {
		return
	}
	s.shipMu.Lock()
	s.dirty[r] = s.dirty[r] || closed
	s.shipMu.Unlock()
	if closed {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Run ships logs to the archive until ctx ends: the new lines of running
// steps every ShipInterval, a finished step's at once, and at start, at
// once, whatever the files of a previous process hold that the archive
// lacks (holes between other servers' segments included). It returns at
// once without an archive.
func (s *Store) Run(ctx context.Context) error {
	if s.archive == nil {
		<-ctx.Done()
		return nil
	}
	s.markLeftovers()
	s.shipDirty(ctx)
	t := time.NewTicker(s.shipEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Ship what is left before the server goes: a viewer on
			// another server then reads every line this one stored.
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.shipDirty(fctx)
			cancel()
			return nil
		case <-t.C:
		case <-s.wake:
		}
		s.shipDirty(ctx)
	}
}

// markLeftovers marks every step file on disk to be shipped (its shipped
// part is found from the archive).
func (s *Store) markLeftovers() {
	_ = filepath.WalkDir(s.dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".jsonl") {
			return nil
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return nil
		}
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if len(parts) != 4 || !strings.HasPrefix(parts[2], "e") {
			return nil
		}
		epoch, err1 := strconv.ParseInt(parts[2][1:], 10, 64)
		step, err2 := strconv.Atoi(strings.TrimSuffix(parts[3], ".jsonl"))
		if err1 == nil && err2 == nil {
			s.markDirty(Ref{RunID: parts[0], JobID: parts[1], Epoch: epoch, Step: step}, false)
		}
		return nil
	})
}

func (s *Store) shipDirty(ctx context.Context) {
	s.shipMu.Lock()
	batch := s.dirty
	s.dirty = map[Ref]bool{}
	s.shipMu.Unlock()
	for r, closed := range batch {
		if ctx.Err() != nil {
			s.requeue(r, closed)
			continue
		}
		if err := s.ship(ctx, r); err != nil {
			s.logger.Warn("logstore: shipping a step log to storage failed; retrying", "log", r.String(), "err", err)
			s.requeue(r, closed)
			continue
		}
		if closed {
			s.shipMu.Lock()
			delete(s.shipped, r) // found again from the archive if the step goes on
			s.shipMu.Unlock()
		}
	}
}

func (s *Store) requeue(r Ref, closed bool) {
	s.shipMu.Lock()
	s.dirty[r] = s.dirty[r] || closed
	s.shipMu.Unlock()
}

// ship uploads the complete lines of r's file that the archive lacks, in
// segments of at most segmentBytes. The first time in this process (or
// after the step closed) it also fills the holes: lines of the file that
// fall between or before the archive's segments, which another server's
// later segments do not make shipped — the case of a server killed holding
// acknowledged lines while the agent went on with another server
// (docs/faults.md). Later calls ship what the file gained since.
func (s *Store) ship(ctx context.Context, r Ref) error {
	p, err := s.path(r)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	s.shipMu.Lock()
	st, known := s.shipped[r]
	s.shipMu.Unlock()
	if !known {
		segs, err := s.segments(ctx, r)
		if err != nil {
			return err
		}
		next := uint64(1) // the lowest seq no segment covers
		for _, sp := range spansOf(segs) {
			if sp.first > next {
				off, err := seekAfter(f, next-1)
				if err != nil {
					return err
				}
				if _, _, err := s.shipFrom(ctx, r, f, off, sp.first-1, false); err != nil {
					return err
				}
			}
			if sp.last == math.MaxUint64 {
				return nil // no seq above it
			}
			next = max(next, sp.last+1)
		}
		st = shipState{seq: next - 1, off: -1}
	}
	if st.off < 0 {
		if st.off, err = seekAfter(f, st.seq); err != nil {
			return err
		}
		s.shipMu.Lock()
		s.shipped[r] = st
		s.shipMu.Unlock()
	}
	_, _, err = s.shipFrom(ctx, r, f, st.off, math.MaxUint64, true)
	return err
}

// shipFrom ships the complete lines of f from offset off on whose seq is at
// most hi, and returns the offset after the last one shipped and its seq.
// track records the progress as r's ship state (the tail of the file, as
// opposed to a hole being filled).
func (s *Store) shipFrom(ctx context.Context, r Ref, f *os.File, off int64, hi uint64, track bool) (int64, uint64, error) {
	var last uint64
	for {
		n, err := f.ReadAt(s.shipBuf, off)
		if err != nil && err != io.EOF {
			return off, last, err
		}
		chunk := s.shipBuf[:n]
		end := bytes.LastIndexByte(chunk, '\n')
		if end < 0 {
			return off, last, nil // nothing complete beyond what was shipped
		}
		chunk, first, top, err := denseRun(chunk[:end+1], hi)
		if err != nil || len(chunk) == 0 {
			return off, last, err
		}
		if _, err := s.archive.Put(ctx, segmentKey(r, first, top), bytes.NewReader(chunk), storage.Meta{}); err != nil {
			return off, last, err
		}
		off, last = off+int64(len(chunk)), top
		if track {
			s.shipMu.Lock()
			s.shipped[r] = shipState{seq: last, off: off}
			s.shipMu.Unlock()
		}
	}
}

// denseRun returns the longest prefix of chunk (whole lines) whose seqs
// follow one another without a jump and stay at most hi, with its first
// and last seq; empty when the first line's seq is above hi. Cutting at a
// jump keeps every segment dense, so that a segment's name tells which
// lines it holds: a file with a hole (the agent was with another server
// meanwhile) never ships a segment whose range claims the other server's
// lines.
func denseRun(chunk []byte, hi uint64) (run []byte, first, last uint64, err error) {
	n := 0
	for n < len(chunk) {
		end := bytes.IndexByte(chunk[n:], '\n')
		if end < 0 {
			break
		}
		seq, err := seqOf(chunk[n : n+end])
		if err != nil {
			return nil, 0, 0, err
		}
		if seq > hi || (n > 0 && seq != last+1) {
			break
		}
		if n == 0 {
			first = seq
		}
		last = seq
		n += end + 1
	}
	return chunk[:n], first, last, nil
}

// seqOf reads the seq a stored line starts with (appendLine), without
// decoding the rest.
func seqOf(line []byte) (uint64, error) {
	rest, ok := bytes.CutPrefix(line, seqPrefix)
	end := bytes.IndexByte(rest, ',')
	if !ok || end < 0 {
		return 0, fmt.Errorf("a stored line does not start with its seq: %.60q", line)
	}
	seq, err := strconv.ParseUint(string(rest[:end]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("a stored line does not start with its seq: %.60q", line)
	}
	return seq, nil
}

// span is a range of seqs the archive holds: overlapping or adjacent
// segments merged.
type span struct{ first, last uint64 }

// spansOf merges segments (in key order, that is by first seq) into spans.
func spansOf(segs []segment) []span {
	var spans []span
	for _, g := range segs {
		if n := len(spans); n > 0 && g.first <= spans[n-1].last+1 {
			spans[n-1].last = max(spans[n-1].last, g.last)
			continue
		}
		spans = append(spans, span{g.first, g.last})
	}
	return spans
}
