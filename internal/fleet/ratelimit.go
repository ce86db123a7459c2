package fleet

import "time"

// limiter is a connection's pair of token buckets, messages and bytes. It
// measures real time (time.Now), not Config.Clock: it shapes throughput.
type limiter struct {
	last        time.Time
	msgs, bytes float64
	overSince   time.Time
}

// take charges one frame of n bytes (when charge) and returns how long the
// reader should wait for the buckets to cover it, and whether the
// connection has now been over its limits for longer than the grace.
func (l *limiter) take(now time.Time, cfg *Config, n int, charge bool) (time.Duration, bool) {
	if l.last.IsZero() {
		l.last, l.msgs, l.bytes = now, float64(cfg.MessageBurst), float64(cfg.ByteBurst)
	}
	if dt := now.Sub(l.last).Seconds(); dt > 0 {
		l.last = now
		l.msgs = min(l.msgs+dt*cfg.MessagesPerSecond, float64(cfg.MessageBurst))
		l.bytes = min(l.bytes+dt*cfg.BytesPerSecond, float64(cfg.ByteBurst))
	}
	if charge {
		l.msgs--
		l.bytes -= float64(n)
	}
	var wait float64
	if l.msgs < 0 {
		wait = -l.msgs / cfg.MessagesPerSecond
	}
	if l.bytes < 0 {
		wait = max(wait, -l.bytes/cfg.BytesPerSecond)
	}
	if wait <= 0 {
		// Only a frame that fit without waiting ends an overrun: one
		// that fit after waiting out its deficit continues it.
		if charge {
			l.overSince = time.Time{}
		}
		return 0, false
	}
	if l.overSince.IsZero() {
		l.overSince = now
	}
	return time.Duration(wait * float64(time.Second)), now.Sub(l.overSince) > cfg.RateLimitGrace
}
