package proto

import (
	"bytes"
	"strconv"

	"github.com/kilnci/kiln/internal/jsonwire"
)

// Log frames are most of what agents send (a fleet's output, 50 lines a
// frame): Decode reads them by hand when they look as Encode writes them,
// one copy of the frame shared by every line's text, and with the full
// decoder otherwise. FuzzDecodeLogFrame holds both roads to the same
// answers.

var logFramePrefix = []byte(`{"type":"log",`)

var (
	frameKeys   = []string{"type", "seq", "data"}
	logKeys     = []string{"job_id", "lease_epoch", "step", "lines"}
	logLineKeys = []string{"seq", "stream", "text", "time_ms"}
)

// readLogFrame is Decode's fast road; ok is false when the frame is not
// one it understands (the full decoder then decides what it is).
func readLogFrame(b []byte) (seq uint64, m *Log, ok bool) {
	if !bytes.HasPrefix(b, logFramePrefix) {
		return 0, nil, false
	}
	m = &Log{}
	hasData := false
	r := jsonwire.NewReader(string(b))
	r.Fields(frameKeys, func(i int) {
		switch i {
		case 0:
			if r.String() != TypeLog {
				r.Fail()
			}
		case 1:
			seq = r.Uint()
		case 2:
			hasData = true
			readLog(r, m)
		}
	})
	if !r.End() || !hasData {
		return 0, nil, false
	}
	return seq, m, true
}

func readLog(r *jsonwire.Reader, m *Log) {
	r.Fields(logKeys, func(i int) {
		switch i {
		case 0:
			m.JobID = r.String()
		case 1:
			m.LeaseEpoch = r.Int()
		case 2:
			m.Step = r.NativeInt()
		case 3:
			m.Lines = make([]LogLine, 0, 64)
			r.Array(func() {
				var l LogLine
				r.Fields(logLineKeys, func(i int) {
					switch i {
					case 0:
						l.Seq = r.Uint()
					case 1:
						l.Stream = r.String()
					case 2:
						l.Text = r.String()
					case 3:
						l.TimeMS = r.Int()
					}
				})
				m.Lines = append(m.Lines, l)
			})
		}
	})
}

// logFrameSize is about the size of m's frame, so it is built in one
// allocation.
func logFrameSize(m *Log) int {
	n := 128 + len(m.JobID)
	for i := range m.Lines {
		n += 64 + len(m.Lines[i].Text)
	}
	return n
}

// appendLogFrame is Encode for a log frame: by hand, because an agent
// streaming a busy step encodes one every few milliseconds. The JSON is
// what the full encoder writes, but for HTML characters, which it leaves
// unescaped.
func appendLogFrame(b []byte, seq uint64, m *Log) []byte {
	b = append(b, logFramePrefix...)
	b = append(b, `"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"data":{"job_id":`...)
	b = jsonwire.AppendString(b, m.JobID)
	b = append(b, `,"lease_epoch":`...)
	b = strconv.AppendInt(b, m.LeaseEpoch, 10)
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, int64(m.Step), 10)
	b = append(b, `,"lines":`...)
	if m.Lines == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range m.Lines {
			l := &m.Lines[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"seq":`...)
			b = strconv.AppendUint(b, l.Seq, 10)
			b = append(b, `,"stream":`...)
			b = jsonwire.AppendString(b, l.Stream)
			b = append(b, `,"text":`...)
			b = jsonwire.AppendString(b, l.Text)
			b = append(b, `,"time_ms":`...)
			b = strconv.AppendInt(b, l.TimeMS, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, "}}"...)
}
