package proto

import (
	"bytes"
	"fmt"

	gojson "github.com/goccy/go-json"
)

// Encoder renders frames as Encode does, into one buffer it reuses: once
// the buffer has grown, a frame costs its data's marshalling and nothing
// else. An agent's write loop sends a frame for every log batch and status
// it reports, so it keeps one; an Encoder is not safe for concurrent use.
type Encoder struct {
	buf bytes.Buffer
	enc *gojson.Encoder
}

// NewEncoder returns an Encoder with an empty buffer.
func NewEncoder() *Encoder {
	e := &Encoder{}
	e.enc = gojson.NewEncoder(&e.buf)
	// Frames are read by kiln, not embedded in HTML; escaping <, > and &
	// would only cost time (the decoded message is the same).
	e.enc.SetEscapeHTML(false)
	return e
}

// Encode returns m's frame; the bytes are valid until the next call.
func (e *Encoder) Encode(seq uint64, m Message) ([]byte, error) {
	if err := checkSeq(seq, m); err != nil {
		return nil, err
	}
	e.buf.Reset()
	if l, ok := m.(*Log); ok {
		e.buf.Grow(logFrameSize(l))
		e.buf.Write(appendLogFrame(e.buf.AvailableBuffer(), seq, l))
		return checkSize(m, e.buf.Bytes())
	}
	e.buf.Write(appendHeader(e.buf.AvailableBuffer(), m.Type(), seq))
	if err := e.enc.Encode(m); err != nil { // appends a newline
		return nil, fmt.Errorf("encode %s: %w", m.Type(), err)
	}
	e.buf.Truncate(e.buf.Len() - 1)
	e.buf.WriteByte('}')
	return checkSize(m, e.buf.Bytes())
}
