package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store"
)

// The dashboard reads and acts through the REST API's own handler, called
// in the process with the session's token in the request's context
// (api.WithSessionToken): every page shows what the API answers, and every
// button is the API operation with the API's role checks, validation and
// audit names. Nothing goes over the network.

// call sends one API request as tk and decodes a JSON answer into out (if
// not nil). An error answer comes back as a *kiln.Error.
func (s *site) call(ctx context.Context, tk store.AdminToken, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	u := path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(api.WithSessionToken(ctx, tk), method, u, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	s.api.ServeHTTP(rec, req)
	if rec.status >= 400 {
		var eb kiln.ErrorBody
		if json.Unmarshal(rec.body.Bytes(), &eb) == nil && eb.Error.Code != "" {
			return &kiln.Error{Code: eb.Error.Code, Message: eb.Error.Message}
		}
		return kiln.Errorf(kiln.CodeOfStatus(rec.status), "the API answered %d to %s %s", rec.status, method, path)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(rec.body.Bytes(), out)
}

// recorder keeps a whole (non-streaming) answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}
func (r *recorder) Write(b []byte) (int, error) { r.wrote = true; return r.body.Write(b) }

// client returns an api.Client whose requests the API handler serves in the
// process as tk, streaming answers through a pipe (log follows).
func (s *site) client(tk store.AdminToken) *api.Client {
	c, _ := api.NewClient("http://kiln.invalid", "", api.WithHTTPClient(&http.Client{Transport: pipeTransport{s.api, tk}}))
	return c
}

// pipeTransport serves a request with a handler, answering as soon as the
// handler writes its header, its body streamed through a pipe.
type pipeTransport struct {
	h  http.Handler
	tk store.AdminToken
}

func (t pipeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(api.WithSessionToken(req.Context(), t.tk))
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer cancel()
		t.h.ServeHTTP(w, req.WithContext(ctx))
		w.WriteHeader(http.StatusOK)
		_ = pw.Close()
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		cancel()
		_ = pr.Close()
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: w.status, Header: w.sent, Request: req,
		Body: cancelBody{pr, cancel}}, nil
}

// pipeWriter is the handler's side of a pipeTransport answer.
type pipeWriter struct {
	header http.Header
	sent   http.Header
	status int
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }
func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.status = code
		w.sent = w.header.Clone() // the reader's copy: the handler may go on touching its own
		close(w.ready)
	})
}
func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}
func (w *pipeWriter) Flush() {}

// cancelBody ends the handler when the reader closes the answer.
type cancelBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b cancelBody) Close() error { b.cancel(); return b.PipeReader.Close() }
