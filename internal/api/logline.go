package api

import (
	"strconv"

	gojson "github.com/goccy/go-json"

	"github.com/kilnci/kiln/internal/jsonwire"
)

// A followed log is a stream of LogLines, a million a second across a busy
// fleet's viewers. The server writes each as its step attempt's head
// followed by the line as the log store keeps it — copied, not decoded and
// encoded again — and the client reads them by hand, with the full decoder
// for any line the fast road does not take. The JSON is a LogLine's either
// way (TestLogLineCodec, TestStoredLogLineIsTheSameLine).

// appendLogLineHead appends what precedes a LogLine's seq — the same for
// every line of a step attempt — up to and including the comma.
func appendLogLineHead(b []byte, l *LogLine) []byte {
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
	return append(b, ',')
}

// appendStoredLogLine appends a LogLine made of a step attempt's head and a
// line as the log store keeps it ({"seq":…,"stream":…,"text":…,"time_ms":…},
// logstore.ReadJSON): the stored fields are LogLine's last four, in its
// order, so the line is the head and the stored object after its brace.
func appendStoredLogLine(b, head, stored []byte) []byte {
	b = append(b, head...)
	b = append(b, stored[1:]...)
	return append(b, '\n')
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
