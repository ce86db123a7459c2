package agenttest

import (
	"encoding/binary"

	"github.com/kilnci/kiln/internal/proto"
)

// WrittenTypes lists the message types of the agent's frames in b, bytes
// it wrote to its connection (a test's view of one write(2)): "?" for a
// frame that is not a protocol message, and nothing for a frame cut off at
// b's end.
func WrittenTypes(b []byte) []string {
	var types []string
	for off := 0; ; {
		payload, next, ok := clientFrame(b, off)
		if !ok {
			return types
		}
		typ := "?"
		if _, m, err := proto.Decode(payload); err == nil {
			typ = m.Type()
		}
		types = append(types, typ)
		off = next
	}
}

// clientFrame parses the masked frame at b[off:] (RFC 6455 §5.2) and
// returns its unmasked payload and where the next frame starts.
func clientFrame(b []byte, off int) (payload []byte, next int, ok bool) {
	if len(b)-off < 2 {
		return nil, 0, false
	}
	p := off + 2
	n := uint64(b[off+1] & 0x7f)
	switch n {
	case 126:
		if len(b) < p+2 {
			return nil, 0, false
		}
		n, p = uint64(binary.BigEndian.Uint16(b[p:])), p+2
	case 127:
		if len(b) < p+8 {
			return nil, 0, false
		}
		n, p = binary.BigEndian.Uint64(b[p:]), p+8
	}
	var key []byte
	if b[off+1]&0x80 != 0 {
		if len(b) < p+4 {
			return nil, 0, false
		}
		key, p = b[p:p+4], p+4
	}
	if uint64(len(b)-p) < n {
		return nil, 0, false
	}
	payload = append([]byte(nil), b[p:p+int(n)]...)
	if key != nil {
		for i := range payload {
			payload[i] ^= key[i%4]
		}
	}
	return payload, p + int(n), true
}
