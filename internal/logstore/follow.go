package logstore

import (
	"bytes"
	"sync"
)

// Event is a batch of new lines of one step of a followed job.
type Event struct {
	Ref Ref
	// Lines are as stored (RawLine): a viewer passes them on as JSON
	// without decoding and encoding them again.
	Lines []RawLine
}

// Subscription receives the new lines of one job as they are stored.
type Subscription struct {
	C <-chan Event

	c      chan Event
	s      *Store
	jobID  string
	once   sync.Once
	lagged bool
	mu     sync.Mutex
}

// Lagged reports whether the subscription was ended because its reader fell
// behind; the reader should Read from its last seen seq and subscribe again.
func (sub *Subscription) Lagged() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.lagged
}

// Close ends the subscription.
func (sub *Subscription) Close() {
	sub.s.subMu.Lock()
	delete(sub.s.subs[sub.jobID], sub)
	if len(sub.s.subs[sub.jobID]) == 0 {
		delete(sub.s.subs, sub.jobID)
	}
	sub.s.subMu.Unlock()
	sub.end(false)
}

func (sub *Subscription) end(lagged bool) {
	sub.once.Do(func() {
		sub.mu.Lock()
		sub.lagged = lagged
		sub.mu.Unlock()
		close(sub.c)
	})
}

// Subscribe follows a job: every batch stored for any of its steps after this
// call is delivered on C, in order per step. buffer bounds how many batches
// may wait for the reader; when it overflows the subscription ends with
// Lagged() true instead of blocking writers or growing memory.
func (s *Store) Subscribe(jobID string, buffer int) *Subscription {
	if buffer <= 0 {
		buffer = 64
	}
	c := make(chan Event, buffer)
	sub := &Subscription{C: c, c: c, s: s, jobID: jobID}
	s.subMu.Lock()
	if s.subs[jobID] == nil {
		s.subs[jobID] = map[*Subscription]struct{}{}
	}
	s.subs[jobID][sub] = struct{}{}
	s.subMu.Unlock()
	return sub
}

func (s *Store) publish(r Ref, lines []Line, stored []byte) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	set := s.subs[r.JobID]
	if len(set) == 0 {
		return
	}
	ev := Event{Ref: r, Lines: splitStored(lines, stored)}
	for sub := range set {
		select {
		case sub.c <- ev:
		default:
			delete(set, sub)
			sub.end(true)
		}
	}
	if len(set) == 0 {
		delete(s.subs, r.JobID)
	}
}

// splitStored cuts a batch as appendLine wrote it (one line per element of
// lines, each ending with a newline) into RawLines, over one copy of it.
func splitStored(lines []Line, stored []byte) []RawLine {
	b := bytes.Clone(stored)
	out := make([]RawLine, len(lines))
	for i := range lines {
		end := bytes.IndexByte(b, '\n')
		out[i] = RawLine{Seq: lines[i].Seq, JSON: b[:end:end]}
		b = b[end+1:]
	}
	return out
}
