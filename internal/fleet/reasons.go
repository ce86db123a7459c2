package fleet

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kilnci/kiln/internal/store"
)

// reasonChunk is how many queued jobs one write of a pending reason
// touches: a few milliseconds of the committer's time, where a key with
// thousands of queued jobs rewritten in one statement held it — and every
// agent's report waiting behind it — for tens of milliseconds.
const reasonChunk = 500

// reasonWriter writes the pending reasons the dispatcher decides, each key's
// in chunks of reasonChunk jobs, each chunk its own committer operation, so
// agents' reports commit in between. One goroutine writes and the latest
// reason per key wins: an older reason's chunks never land after a newer
// one's, which rewrites every job of the key anyway.
type reasonWriter struct {
	cm   *committer
	log  func(msg string, args ...any)
	wake chan struct{}

	mu   sync.Mutex
	want map[string]decidedReason // key → reason still to write
}

// decidedReason is a pending reason and when the dispatcher decided it.
type decidedReason struct {
	reason string
	at     time.Time
}

func newReasonWriter(cm *committer, log func(string, ...any)) *reasonWriter {
	return &reasonWriter{cm: cm, log: log, wake: make(chan struct{}, 1), want: map[string]decidedReason{}}
}

// set asks for the reasons, decided at at, to be written, replacing any
// not yet written.
func (w *reasonWriter) set(updates map[string]string, at time.Time) {
	w.mu.Lock()
	for k, r := range updates {
		w.want[k] = decidedReason{reason: r, at: at}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *reasonWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		for k, r, ok := w.next(); ok && ctx.Err() == nil; k, r, ok = w.next() {
			w.write(k, r)
		}
	}
}

// next takes a key whose reason is to be written.
func (w *reasonWriter) next() (key string, r decidedReason, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, r := range w.want {
		delete(w.want, k)
		return k, r, true
	}
	return "", decidedReason{}, false
}

// write writes the key's reason chunk by chunk, and stops early when a
// newer reason for the key is waiting (it will rewrite them all).
func (w *reasonWriter) write(key string, r decidedReason) {
	for {
		var n int
		err := w.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
			var err error
			n, err = tx.Queue().SetPendingReasonForKey(ctx, key, r.reason, reasonChunk, r.at)
			return store.Effects{}, err
		})
		if err != nil {
			if !errors.Is(err, errStopped) {
				w.log("fleet: writing a pending reason failed; the next pass writes it again", "key", key, "err", err)
			}
			return
		}
		if n < reasonChunk {
			return
		}
		w.mu.Lock()
		_, newer := w.want[key]
		w.mu.Unlock()
		if newer {
			return
		}
	}
}
