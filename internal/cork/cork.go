// Package cork holds a connection's writes and sends them together: one
// write(2) for several WebSocket frames. Both ends of an agent's connection
// use it. The server corks while it answers an agent's job end, so the
// next job and the acknowledgement leave together; the agent corks while
// it writes what is ready at once (a job's acknowledgement with its
// running status, a status with the log lines before it), so the server
// wakes and reads once for them instead of once per frame. On this
// project's 2-core machines a socket write costs 7–20 µs and a read with
// its wake-up more, against a server's ~150–200 µs per job.
//
// The connection sits under coder/websocket, which writes each frame with
// one Flush of its bufio.Writer and serialises frames; corking changes when
// bytes leave, never their order.
package cork

import (
	"net"
	"sync"
	"time"
)

// Conn is a network connection whose writes can be held.
type Conn struct {
	net.Conn
	timeout time.Duration // bounds the write that uncorks

	mu     sync.Mutex // held across writes: uncork's bytes go first
	corked bool
	buf    *[]byte // the held bytes while corked, from bufs
}

// New wraps c. timeout, when positive, bounds the write that sends held
// bytes: held writes returned at once, so no caller's deadline covers
// them. Zero leaves that write to end when the connection does.
func New(c net.Conn, timeout time.Duration) *Conn {
	return &Conn{Conn: c, timeout: timeout}
}

// bufs holds the buffers of corked connections, so an idle connection
// keeps none.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		*c.buf = append(*c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// Corked reports whether writes are held.
func (c *Conn) Corked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.corked
}

// Held is how many bytes are held.
func (c *Conn) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		return 0
	}
	return len(*c.buf)
}

// Cork holds writes until Uncork.
func (c *Conn) Cork() {
	c.mu.Lock()
	if !c.corked {
		c.corked, c.buf = true, bufs.Get().(*[]byte)
	}
	c.mu.Unlock()
}

// Uncork sends what was held, within the write timeout if any. A failed write
// ends the connection the way coder/websocket's own timeouts do: the
// reader sees it closed.
func (c *Conn) Uncork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		return
	}
	b := c.buf
	c.corked, c.buf = false, nil
	if len(*b) > 0 {
		if c.timeout > 0 {
			_ = c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
			defer func() { _ = c.Conn.SetWriteDeadline(time.Time{}) }()
		}
		if _, err := c.Conn.Write(*b); err != nil {
			_ = c.Conn.Close()
		}
	}
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		bufs.Put(b)
	}
}
