package fleet

import (
	"bufio"
	"net"
	"net/http"
	"time"

	"github.com/kilnci/kiln/internal/cork"
)

// An agent's connection is corkable (package cork): the reader corks while
// it answers an agent's job end, whose next job and acknowledgement then
// leave in one system call instead of two.

// corkWriter hands coder/websocket's Accept a cork.Conn when it hijacks the
// request's connection.
type corkWriter struct {
	http.ResponseWriter
	timeout time.Duration
	conn    *cork.Conn // set by Hijack
}

func (w *corkWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	rwc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// net/http hands over an empty writer (the 101 response was flushed);
	// flushing again costs nothing and keeps any byte in order.
	if err := brw.Writer.Flush(); err != nil {
		_ = rwc.Close()
		return nil, nil, err
	}
	w.conn = cork.New(rwc, w.timeout)
	return w.conn, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(w.conn, brw.Writer.Size())), nil
}
