package cluster

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/store"
)

// WakeChannel is the PostgreSQL notification channel of job wake-ups.
const WakeChannel = "kiln_wake"

// wakeBuffer bounds the wake-ups waiting either way; a wake-up that finds
// the buffer full is dropped, which the fleet's redrive covers.
const wakeBuffer = 256

// Publish tells the other coordinators that jobs entered the queue, so one
// with an idle agent claims them at once. It never blocks: the publisher
// sends on its own goroutine, coalescing what waits.
func (c *Cluster) Publish(jobIDs []string) {
	if c.cfg.Sole || len(jobIDs) == 0 {
		return
	}
	select {
	case c.publish <- jobIDs:
	default:
	}
}

// Wakes delivers the job ids other coordinators published (an empty slice:
// wake-ups may have been missed, offer the whole queue again).
func (c *Cluster) Wakes() <-chan []string { return c.wakes }

func (c *Cluster) publishLoop(ctx context.Context) {
	for {
		var ids []string
		select {
		case <-ctx.Done():
			return
		case ids = <-c.publish:
		}
	more:
		for {
			select {
			case more := <-c.publish:
				ids = append(ids, more...)
			default:
				break more
			}
		}
		c.log.Debug("cluster: publishing a wake-up", "jobs", len(ids))
		for _, p := range payloads(c.id, ids) {
			if err := c.db.Notify(ctx, WakeChannel, p); err != nil && ctx.Err() == nil {
				c.log.Warn("cluster: publishing a wake-up failed; the others' redrive will find the jobs", "err", err)
			}
		}
	}
}

// payloads splits a wake-up into notifications: "<from> <id>,<id>…".
func payloads(from string, ids []string) []string {
	var out []string
	var b strings.Builder
	for _, id := range ids {
		if b.Len() > 0 && b.Len()+1+len(id) > store.MaxNotifyPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(from)
			b.WriteByte(' ')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(id)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// parsePayload reads a wake-up; ok is false for one this coordinator sent
// or one it cannot read.
func parsePayload(self, p string) (ids []string, ok bool) {
	from, list, found := strings.Cut(p, " ")
	if !found || from == self || from == "" {
		return nil, false
	}
	for _, id := range strings.Split(list, ",") {
		if id != "" {
			ids = append(ids, id)
		}
	}
	return ids, len(ids) > 0
}

// listen receives the other coordinators' wake-ups until ctx ends,
// reconnecting with backoff; after every (re)connection it asks for a
// redrive, since notifications sent meanwhile were missed.
func (c *Cluster) listen(ctx context.Context) {
	if c.cfg.Sole {
		return
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.db.Listen(ctx, WakeChannel, func() {
			backoff = 100 * time.Millisecond
			c.wake(ctx, []string{})
		}, func(p string) {
			if ids, ok := parsePayload(c.id, p); ok {
				c.wake(ctx, ids)
			}
		})
		if errors.Is(err, store.ErrNoNotifications) || ctx.Err() != nil {
			return
		}
		c.log.Warn("cluster: the wake-up listener failed; reconnecting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (c *Cluster) wake(ctx context.Context, ids []string) {
	select {
	case c.wakes <- ids:
	case <-ctx.Done():
	default:
	}
}
