package forge

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/kilnci/kiln"
)

// DefaultInMemoryBody is how much of a webhook body is held in memory
// before it is verified; the rest of a larger body goes to a temporary
// file (BodyLimits.SpoolDir).
const DefaultInMemoryBody = 256 << 10

// BodyLimits bound what reading one webhook body may hold before its
// signature is checked (B103): a body of at most InMemory bytes is read
// into memory, a larger one (up to Max) into a temporary file in SpoolDir,
// which is unlinked as soon as it is created, so it is gone when the
// request ends or the server dies. Only a verified body is read into
// memory whole.
type BodyLimits struct {
	Max      int64  // largest body (413 above); ≤ 0: DefaultMaxBody
	InMemory int64  // ≤ 0: DefaultInMemoryBody
	SpoolDir string // "": the system's temporary directory
}

func (l BodyLimits) withDefaults() BodyLimits {
	if l.Max <= 0 {
		l.Max = DefaultMaxBody
	}
	if l.InMemory <= 0 {
		l.InMemory = DefaultInMemoryBody
	}
	l.InMemory = min(l.InMemory, l.Max)
	return l
}

// payload is a body read but not yet verified: in memory, or in an
// unlinked temporary file.
type payload struct {
	mem  []byte
	file *os.File
	size int64
}

// close releases the temporary file, if any.
func (p *payload) close() {
	if p.file != nil {
		p.file.Close()
	}
}

// reader reads the whole body from its start.
func (p *payload) reader() io.Reader {
	if p.file != nil {
		return io.NewSectionReader(p.file, 0, p.size)
	}
	return bytes.NewReader(p.mem)
}

// hmacSHA256 is the HMAC-SHA256 of the body under secret.
func (p *payload) hmacSHA256(secret []byte) ([]byte, error) {
	m := hmac.New(sha256.New, secret)
	if _, err := io.Copy(m, p.reader()); err != nil {
		return nil, err
	}
	return m.Sum(nil), nil
}

// bytes returns the body in memory; call it only once it is verified.
func (p *payload) bytes() ([]byte, error) {
	if p.file == nil {
		return p.mem, nil
	}
	b := make([]byte, p.size)
	if _, err := io.ReadFull(p.reader(), b); err != nil {
		return nil, err
	}
	return b, nil
}

// readPayload reads a request body within lim. Errors are ReadBody's: a
// declared or actual size over the limit is CodeTooLarge (413); a body
// shorter than its Content-Length, or one that fails to read (a client too
// slow for the server's read timeout), is CodeInvalid (400).
func readPayload(body io.Reader, contentLength int64, lim BodyLimits) (*payload, error) {
	lim = lim.withDefaults()
	if contentLength > lim.Max {
		return nil, tooLarge(lim.Max)
	}
	if body == nil {
		body = http.NoBody
	}
	// The first InMemory bytes (and one more, to tell whether there are
	// more) go to memory, in one buffer sized by what was declared.
	first := lim.InMemory + 1
	if contentLength >= 0 && contentLength < first {
		first = contentLength + 1
	}
	buf := make([]byte, first)
	n, err := io.ReadFull(body, buf)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, readError(err, lim.Max)
	}
	p := &payload{mem: buf[:n], size: int64(n)}
	if p.size > lim.InMemory {
		if err := p.spool(body, lim); err != nil {
			p.close()
			return nil, err
		}
	}
	switch {
	case p.size > lim.Max:
		p.close()
		return nil, tooLarge(lim.Max)
	case contentLength >= 0 && p.size != contentLength:
		p.close()
		return nil, kiln.Errorf(kiln.CodeInvalid, "the body is truncated: %d of %d declared bytes arrived", p.size, contentLength)
	}
	return p, nil
}

// spool moves what was read to an unlinked temporary file and copies the
// rest of the body after it, through a buffer of InMemory bytes at most.
func (p *payload) spool(body io.Reader, lim BodyLimits) error {
	f, err := os.CreateTemp(lim.SpoolDir, "webhook-*")
	if err != nil {
		return kiln.Errorf(kiln.CodeUnavailable, "the body could not be spooled; try again")
	}
	// Unlinked at once: the data lives as long as the descriptor, so
	// nothing is left behind by an error path or a crash.
	_ = os.Remove(f.Name())
	p.file = f
	if _, err := f.Write(p.mem); err != nil {
		return kiln.Errorf(kiln.CodeUnavailable, "the body could not be spooled; try again")
	}
	copyBuf := p.mem[:cap(p.mem)]
	p.mem = nil
	n, err := io.CopyBuffer(onlyWriter{f}, onlyReader{io.LimitReader(body, lim.Max+1-p.size)}, copyBuf)
	p.size += n
	if err != nil {
		var we writeErr
		if errors.As(err, &we) {
			return kiln.Errorf(kiln.CodeUnavailable, "the body could not be spooled; try again")
		}
		return readError(err, lim.Max)
	}
	return nil
}

func readError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return tooLarge(limit)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return kiln.Errorf(kiln.CodeInvalid, "the body is truncated: it ended before its declared Content-Length")
	}
	return kiln.Errorf(kiln.CodeInvalid, "the body could not be read")
}

// onlyReader and onlyWriter hide ReadFrom/WriteTo, so io.CopyBuffer uses
// the bounded buffer it is given; onlyWriter marks write errors.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(b []byte) (int, error) { return o.r.Read(b) }

type onlyWriter struct{ f *os.File }

type writeErr struct{ error }

func (o onlyWriter) Write(b []byte) (int, error) {
	n, err := o.f.Write(b)
	if err != nil {
		return n, writeErr{fmt.Errorf("spool: %w", err)}
	}
	return n, nil
}
