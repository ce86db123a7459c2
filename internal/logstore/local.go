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
	"sort"
	"strconv"
	"strings"
)

// This server's own files, for retention's local pass: every server
// sharing a database keeps in its data directory the logs of the steps its
// agents ran, and only the leader's garbage collector purges runs, so each
// server cleans its own directory — the runs that were purged, and, with an
// archive, the finished runs whose every line was shipped
// (docs/storage.md#retention).

// LocalRuns returns the run directories of this server's log directory
// whose names sort after after, in name order, at most limit of them.
func (s *Store) LocalRuns(after string, limit int) ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	// ReadDir sorts by name.
	i := sort.Search(len(ents), func(i int) bool { return ents[i].Name() > after })
	var out []string
	for _, e := range ents[i:] {
		if len(out) >= limit {
			break
		}
		if e.IsDir() && validID(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// RemoveLocalRun deletes this server's files of a run (one the garbage
// collector purged): open files are closed first, and nothing of the run
// is left to ship.
func (s *Store) RemoveLocalRun(runID string) error {
	if !validID(runID) {
		return fmt.Errorf("logstore: invalid run id %q", runID)
	}
	s.forget(func(r Ref) bool { return r.RunID == runID })
	return os.RemoveAll(filepath.Join(s.dir, runID))
}

// RemoveShipped deletes this server's step files of a finished run whose
// every complete line is in the archive's segments, and the directories
// they leave empty. It reports how many files it kept: not (yet) shipped
// in full (handed to the shipper again: Store.ship fills holes), still open or waiting for the shipper, or not a step file. It
// must be called only for a finished run, whose logs no longer grow;
// without an archive it keeps everything.
func (s *Store) RemoveShipped(ctx context.Context, runID string) (kept int, err error) {
	if !validID(runID) {
		return 0, fmt.Errorf("logstore: invalid run id %q", runID)
	}
	root := filepath.Join(s.dir, runID)
	var files []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("logstore: %w", err)
	}
	for _, p := range files {
		r, ok := s.refOf(p)
		if !ok || s.archive == nil || s.busy(r) {
			kept++
			continue
		}
		all, err := s.shippedAll(ctx, p, r)
		if err != nil {
			return kept, err
		}
		if !all {
			// Lines the archive lacks: ship them (holes left by a server
			// killed before shipping, found again from the archive), so
			// that a later pass removes the file.
			kept++
			s.reship(r)
			continue
		}
		s.forget(func(x Ref) bool { return x == r })
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return kept, fmt.Errorf("logstore: %w", err)
		}
	}
	removeEmptyDirs(root)
	return kept, nil
}

// refOf parses a step file's path: <dir>/<run>/<job>/e<epoch>/<step>.jsonl.
func (s *Store) refOf(p string) (Ref, bool) {
	rel, err := filepath.Rel(s.dir, p)
	if err != nil {
		return Ref{}, false
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if len(parts) != 4 || !strings.HasPrefix(parts[2], "e") || !strings.HasSuffix(parts[3], ".jsonl") {
		return Ref{}, false
	}
	epoch, err1 := strconv.ParseInt(parts[2][1:], 10, 64)
	step, err2 := strconv.Atoi(strings.TrimSuffix(parts[3], ".jsonl"))
	r := Ref{RunID: parts[0], JobID: parts[1], Epoch: epoch, Step: step}
	if err1 != nil || err2 != nil {
		return Ref{}, false
	}
	if q, err := s.path(r); err != nil || q != p {
		return Ref{}, false
	}
	return r, true
}

// busy reports whether r's file is open for writing or has lines the
// shipper has not taken yet.
func (s *Store) busy(r Ref) bool {
	s.mu.Lock()
	_, open := s.open[r]
	s.mu.Unlock()
	s.shipMu.Lock()
	_, dirty := s.dirty[r]
	s.shipMu.Unlock()
	return open || dirty
}

// reship has the shipper look at r's file afresh: what the archive lacks,
// holes between segments included (Store.ship).
func (s *Store) reship(r Ref) {
	s.shipMu.Lock()
	delete(s.shipped, r)
	s.shipMu.Unlock()
	s.markDirty(r, true)
}

// forget closes the open files and drops the shipping state of the steps
// match selects.
func (s *Store) forget(match func(Ref) bool) {
	s.mu.Lock()
	var closing []*stepFile
	for r, e := range s.open {
		if match(r) {
			s.lru.Remove(e)
			delete(s.open, r)
			closing = append(closing, e.Value.(*stepFile))
		}
	}
	s.mu.Unlock()
	for _, sf := range closing {
		sf.mu.Lock()
		if sf.f != nil {
			sf.f.Close()
			sf.f = nil
		}
		sf.mu.Unlock()
	}
	s.shipMu.Lock()
	for r := range s.dirty {
		if match(r) {
			delete(s.dirty, r)
		}
	}
	for r := range s.shipped {
		if match(r) {
			delete(s.shipped, r)
		}
	}
	s.shipMu.Unlock()
}

// shippedAll reports whether every complete line of the file at p is in
// one of r's archived segments. The segments are merged into spans of
// seqs; a line whose seq falls in none — before the first span, between
// two, after the last — is looked for by binary search (seekAfter), so the
// check costs a few small reads per gap, not a read of the file. A seq the
// agent skipped (a gap marker's, a capped step's) may fall between two
// spans: no line has it, so it does not count.
func (s *Store) shippedAll(ctx context.Context, p string, r Ref) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("logstore: %w", err)
	}
	defer f.Close()
	complete, ok, err := completeEnd(f)
	if err != nil || !ok {
		return false, err
	}
	if complete == 0 {
		return true, nil // no line at all
	}
	segs, err := s.segments(ctx, r)
	if err != nil {
		return false, err
	}
	spans := spansOf(segs)
	// hasLine: a complete line with lo ≤ seq ≤ hi.
	hasLine := func(lo, hi uint64) (bool, error) {
		off, err := seekAfter(f, lo-1)
		if err != nil || off >= complete {
			return false, err
		}
		_, seq, ok, err := lineAt(f, off, complete)
		if err != nil || !ok {
			return true, err // a line whose seq cannot be read: not known to be shipped
		}
		return seq <= hi, nil
	}
	next := uint64(1) // the lowest seq not known to be covered
	for _, sp := range spans {
		if sp.first > next {
			if found, err := hasLine(next, sp.first-1); found || err != nil {
				return false, err
			}
		}
		if sp.last == math.MaxUint64 {
			return true, nil
		}
		next = max(next, sp.last+1)
	}
	found, err := hasLine(next, math.MaxUint64)
	return !found, err
}

// completeEnd is the offset just after the file's last complete line (0:
// none). ok is false when no line ends in the last tailBytes of a longer
// file: no stored line is that long, so the file is not one this store
// wrote whole, and it is kept.
func completeEnd(f *os.File) (end int64, ok bool, err error) {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, err == nil, err
	}
	off := max(st.Size()-tailBytes, 0)
	data := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(data, off); err != nil && err != io.EOF {
		return 0, false, err
	}
	i := bytes.LastIndexByte(data, '\n')
	if i < 0 {
		return 0, off == 0, nil
	}
	return off + int64(i) + 1, true, nil
}

// removeEmptyDirs removes the directories under root, and root, that are
// left empty, deepest first (a directory that is not empty stays).
func removeEmptyDirs(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}
