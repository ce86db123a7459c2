package server

import (
	"io"
	"net/http"
	"time"
)

// perWriteDeadlines gives each write of a response a deadline of its own,
// d from when it starts (B101): a client that stops taking a response is
// let go after d, while a long one it keeps reading — a log follow, an API
// call that waits for a dispatch to be processed — is never cut off by a
// deadline counted from the request. (http.Server.WriteTimeout is such a
// deadline for the whole response, so it is not set.) /ws is mounted
// without it: the WebSocket library gives every frame written its own
// deadline.
//
// It also clears http.read_timeout's deadline once the request's body has
// arrived (at once when it has none): the timeout bounds how long a client
// takes to send its request, and left in place it would cancel a handler
// still answering (net/http cancels the request's context when its
// background read times out) — a download, or a dispatch waiting for its
// outcome.
func perWriteDeadlines(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		clearRead := func() { _ = rc.SetReadDeadline(time.Time{}) }
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			clearRead()
		} else {
			r.Body = &bodyDone{ReadCloser: r.Body, done: clearRead}
		}
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: rc, d: d}, r)
	})
}

// bodyDone calls done once the body has been read to its end.
type bodyDone struct {
	io.ReadCloser
	done func()
	over bool
}

func (b *bodyDone) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.over {
		b.over = true
		b.done()
	}
	return n, err
}

type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) arm() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

func (w *deadlineWriter) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(b)
}

// Flush arms the deadline for the write the flush makes.
func (w *deadlineWriter) Flush() {
	w.arm()
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
