package server

import (
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
func perWriteDeadlines(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: d}, r)
	})
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
