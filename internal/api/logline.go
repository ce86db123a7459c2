package api

import (
	"strconv"

	gojson "github.com/goccy/go-json"

	"github.com/kilnci/kiln/internal/jsonwire"
)

// A followed log is a stream of LogLines, a million a second across a busy
// fleet's viewers: the server writes them by hand and the client reads them
// by hand, with the full decoder for any line the fast road does not take.
// The JSON is the same either way (TestLogLineCodec).

// appendLogLine appends l as one NDJSON line, with the fields in LogLine's
// order.
func appendLogLine(b []byte, l *LogLine) []byte {
	b = append(b, `{"job":`...)
	b = jsonwire.AppendString(b, l.Job)
	b = append(b, `,"job_id":`...)
	b = jsonwire.AppendString(b, l.JobID)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, l.Attempt, 10)
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, int64(l.Step), 10)
	if l.StepName != "" {
		b = append(b, `,"step_name":`...)
		b = jsonwire.AppendString(b, l.StepName)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, l.Seq, 10)
	b = append(b, `,"stream":`...)
	b = jsonwire.AppendString(b, l.Stream)
	b = append(b, `,"text":`...)
	b = jsonwire.AppendString(b, l.Text)
	b = append(b, `,"time_ms":`...)
	b = strconv.AppendInt(b, l.TimeMS, 10)
	return append(b, "}\n"...)
}

// decodeLogLine reads one NDJSON line of a log stream.
func decodeLogLine(b []byte) (LogLine, error) {
	if l, ok := readLogLine(string(b)); ok {
		return l, nil
	}
	var l LogLine
	err := gojson.Unmarshal(b, &l)
	return l, err
}

// logLineKeys are a LogLine's keys, in readLogLine's order.
var logLineKeys = []string{"job", "job_id", "attempt", "step", "step_name", "seq", "stream", "text", "time_ms"}

// readLogLine is decodeLogLine's fast road.
func readLogLine(s string) (LogLine, bool) {
	var l LogLine
	r := jsonwire.NewReader(s)
	r.Fields(logLineKeys, func(i int) {
		switch i {
		case 0:
			l.Job = r.String()
		case 1:
			l.JobID = r.String()
		case 2:
			l.Attempt = r.Int()
		case 3:
			l.Step = r.NativeInt()
		case 4:
			l.StepName = r.String()
		case 5:
			l.Seq = r.Uint()
		case 6:
			l.Stream = r.String()
		case 7:
			l.Text = r.String()
		case 8:
			l.TimeMS = r.Int()
		}
	})
	return l, r.End()
}
