package agent

import (
	"math/rand/v2"
	"time"
)

// backoff spaces reconnect attempts: the delay starts at min, doubles after
// every failed attempt up to max, and resets once a registration succeeds.
// Each delay is jittered into [d/2, d] so that agents cut off together by an
// orchestrator restart do not all come back in the same instant.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
	rand     func(n int64) int64 // [0, n)
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{min: min, max: max, rand: rand.Int64N}
}

// next is the delay before the next attempt.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	half := b.cur / 2
	if half <= 0 {
		return b.cur
	}
	return b.cur - half + time.Duration(b.rand(int64(half)+1))
}

func (b *backoff) reset() { b.cur = 0 }
