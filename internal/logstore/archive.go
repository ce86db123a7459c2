package logstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

// segment is one shipped piece of a step's log: the lines first..last.
type segment struct {
	key         string
	first, last uint64
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

// readArchive appends to out the archived lines of r with seq > after, up
// to limit lines in all, and returns the highest seq the archive holds.
func (s *Store) readArchive(ctx context.Context, r Ref, after uint64, limit int, out []Line) ([]Line, uint64, error) {
	segs, err := s.segments(ctx, r)
	if err != nil || len(segs) == 0 {
		return out, 0, err
	}
	for _, seg := range segs {
		if seg.last <= after || len(out) >= limit {
			continue
		}
		body, _, err := s.archive.Get(ctx, seg.key)
		if errors.Is(err, storage.ErrNotFound) {
			continue // deleted by retention meanwhile
		}
		if err != nil {
			return out, 0, fmt.Errorf("logstore: read %s: %w", seg.key, err)
		}
		out, err = scanLines(body, after, limit, out)
		body.Close()
		if err != nil {
			return out, 0, fmt.Errorf("logstore: read %s: %w", seg.key, err)
		}
	}
	return out, segs[len(segs)-1].last, nil
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
// steps every ShipInterval, a finished step's at once, and at start what
// the files of a previous process hold beyond what was shipped. It
// returns at once without an archive.
func (s *Store) Run(ctx context.Context) error {
	if s.archive == nil {
		<-ctx.Done()
		return nil
	}
	s.markLeftovers()
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

// ship uploads the complete lines of r's file past what was shipped, in
// segments of at most segmentBytes.
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
		if st.seq, err = s.archivedLast(ctx, r); err != nil {
			return err
		}
		st.off = -1
	}
	if st.off < 0 {
		if st.off, err = seekAfter(f, st.seq); err != nil {
			return err
		}
	}
	for {
		n, err := f.ReadAt(s.shipBuf, st.off)
		if err != nil && err != io.EOF {
			return err
		}
		chunk := s.shipBuf[:n]
		end := bytes.LastIndexByte(chunk, '\n')
		if end < 0 {
			break // nothing complete beyond what was shipped
		}
		chunk = chunk[:end+1]
		first, err := decodeLine(chunk[:bytes.IndexByte(chunk, '\n')])
		if err != nil {
			return err
		}
		last, _, err := lastSeq(chunk)
		if err != nil {
			return err
		}
		if _, err := s.archive.Put(ctx, segmentKey(r, first.Seq, last), bytes.NewReader(chunk), storage.Meta{}); err != nil {
			return err
		}
		st.seq, st.off = last, st.off+int64(len(chunk))
		s.shipMu.Lock()
		s.shipped[r] = st
		s.shipMu.Unlock()
	}
	return nil
}
