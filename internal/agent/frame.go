package agent

import (
	"bytes"
	"fmt"
	"strconv"

	gojson "github.com/goccy/go-json"

	"github.com/kilnci/kiln/internal/proto"
)

// frameEncoder renders durable frames into one reused buffer. It writes the
// envelope proto.Encode writes ({"type":…,"seq":…,"data":…}) but marshals
// the data only once and allocates nothing per frame once the buffer has
// grown: log frames are the agent's hottest path, and proto.Encode's second
// marshal of the data and its fresh buffer per frame doubled the cost.
type frameEncoder struct {
	buf bytes.Buffer
	enc *gojson.Encoder
}

func newFrameEncoder() *frameEncoder {
	f := &frameEncoder{}
	f.enc = gojson.NewEncoder(&f.buf)
	f.enc.SetEscapeHTML(false)
	return f
}

// encode returns the frame; the bytes are valid until the next call.
func (f *frameEncoder) encode(seq uint64, m proto.Message) ([]byte, error) {
	f.buf.Reset()
	f.buf.WriteString(`{"type":`)
	f.buf.WriteString(strconv.Quote(m.Type())) // types are plain ASCII
	f.buf.WriteString(`,"seq":`)
	f.buf.WriteString(strconv.FormatUint(seq, 10))
	f.buf.WriteString(`,"data":`)
	if err := f.enc.Encode(m); err != nil { // appends a newline
		return nil, fmt.Errorf("encode %s: %w", m.Type(), err)
	}
	f.buf.Truncate(f.buf.Len() - 1)
	f.buf.WriteByte('}')
	if f.buf.Len() > proto.MaxFrameBytes {
		return nil, fmt.Errorf("encode %s: frame of %d bytes exceeds %d", m.Type(), f.buf.Len(), proto.MaxFrameBytes)
	}
	return f.buf.Bytes(), nil
}
