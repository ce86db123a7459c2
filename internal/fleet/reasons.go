package fleet

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kilnci/kiln/internal/store"
)

// reasonWriter writes the pending reasons the dispatcher decides, off the
// dispatcher's path: one row per key (store.Queue.SetPendingReasonForKey),
// a committer operation each. One goroutine writes, and the latest reason
// decided for a key replaces one not yet written.
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

// write writes the key's reason.
func (w *reasonWriter) write(key string, r decidedReason) {
	err := w.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		return store.Effects{}, tx.Queue().SetPendingReasonForKey(ctx, key, r.reason, r.at)
	})
	if err != nil && !errors.Is(err, errStopped) {
		w.log("fleet: writing a pending reason failed; the next pass writes it again", "key", key, "err", err)
	}
}
