package fleet

import (
	"net"
	"sync"
)

// Until a connection authenticates, anyone on the network holds it. These
// bound what such connections cost the server (B102): each reads frames of
// at most MaxUnauthenticatedFrameBytes (the auth frame is a few hundred
// bytes), and there are at most MaxUnauthenticated of them in all and
// MaxUnauthenticatedPerAddress from one remote address, so a stranger
// holds at most a few KiB per connection, for auth_timeout.
const (
	// MaxUnauthenticatedFrameBytes is the read limit of a connection that
	// has not authenticated; the agent's configured limit applies after.
	MaxUnauthenticatedFrameBytes = 4 << 10
	DefaultMaxUnauthenticated    = 512
	// DefaultMaxUnauthenticatedPerAddress is above the 32 handshakes kiln
	// bench keeps in flight from one host.
	DefaultMaxUnauthenticatedPerAddress = 64
)

// unauthLimiter counts the connections that have not authenticated, in
// all and per remote address.
type unauthLimiter struct {
	mu      sync.Mutex
	total   int
	perAddr map[string]int
}

// acquire takes a slot for a connection from addr ("host:port"), or says
// which limit is reached: "" when a slot was taken.
func (u *unauthLimiter) acquire(addr string, maxTotal, maxPer int) (host, full string) {
	host = remoteHost(addr)
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.total >= maxTotal:
		return host, "total"
	case u.perAddr[host] >= maxPer:
		return host, "address"
	}
	if u.perAddr == nil {
		u.perAddr = map[string]int{}
	}
	u.total++
	u.perAddr[host]++
	return host, ""
}

func (u *unauthLimiter) release(host string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.total--
	if u.perAddr[host]--; u.perAddr[host] <= 0 {
		delete(u.perAddr, host)
	}
}

func remoteHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// unauthSlot is one connection's slot, released once: when it
// authenticates or when it ends before that.
type unauthSlot struct {
	once sync.Once
	u    *unauthLimiter
	host string
}

func (s *unauthSlot) release() {
	if s != nil {
		s.once.Do(func() { s.u.release(s.host) })
	}
}
