package agent

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
)

// A durable frame the orchestrator refuses would be replayed after every
// reconnect and refused again, forever. So whatever a job reports is made to
// fit the protocol's limits here, before it gets a seq: text is valid UTF-8
// and clipped to its limit, outputs are bounded.

// clip returns s as valid UTF-8 of at most max bytes, cut at a rune boundary.
func clip(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// cleanLines makes log lines fit: stream known, text valid and bounded, seqs
// strictly increasing (a runner bug must not poison the outbox). Lines whose
// seq does not follow are dropped.
func cleanLines(lines []proto.LogLine) []proto.LogLine {
	out := lines[:0]
	var prev uint64
	for _, l := range lines {
		if l.Seq <= prev {
			continue
		}
		prev = l.Seq
		switch l.Stream {
		case proto.StreamStdout, proto.StreamStderr, proto.StreamSystem:
		default:
			l.Stream = proto.StreamStdout
		}
		if len(l.Text) > proto.MaxLineBytes || !utf8.ValidString(l.Text) {
			l.Text = clip(l.Text, proto.MaxLineBytes)
		}
		out = append(out, l)
	}
	return out
}

func cleanStep(s *proto.StepStatus) bool {
	if s.Index < -1 || s.Index >= proto.MaxSteps || !s.Status.Valid() {
		return false
	}
	s.Name = clip(s.Name, proto.MaxNameLen)
	s.Error = clip(s.Error, proto.MaxErrorLen)
	s.Attempt = min(max(s.Attempt, 0), 1000)
	return true
}

// finalStatus is the job.status a result becomes: only success, failed and
// cancelled are final statuses an agent may report.
func finalStatus(r Result) *proto.JobStatus {
	st := &proto.JobStatus{Status: r.Status, Error: clip(r.Error, proto.MaxErrorLen)}
	switch r.Status {
	case kiln.JobSuccess, kiln.JobCancelled, kiln.JobFailed:
	default:
		st.Status = kiln.JobFailed
		if st.Error == "" {
			st.Error = clip(fmt.Sprintf("the job ended as %q", r.Status), proto.MaxErrorLen)
		}
	}
	var ok bool
	st.Outputs, ok = cleanOutputs(r.Outputs)
	if !ok {
		// Jobs that need the outputs would run on a partial set: fail instead.
		msg := fmt.Sprintf("the job's outputs exceed the limits of %d outputs and %d bytes in total", proto.MaxOutputs, proto.MaxOutputBytes)
		if st.Error != "" {
			msg = st.Error + "; " + msg
		}
		st.Status, st.Error = kiln.JobFailed, clip(msg, proto.MaxErrorLen)
	}
	return st
}

// cleanOutputs keeps outputs within the protocol's limits: it drops names
// the protocol refuses, and reports false when the rest is still too large.
func cleanOutputs(in map[string]string) (map[string]string, bool) {
	if len(in) == 0 {
		return nil, true
	}
	out := make(map[string]string, len(in))
	total := 0
	for k, v := range in {
		if k == "" || len(k) > proto.MaxNameLen || !utf8.ValidString(k) {
			continue
		}
		v = clip(v, proto.MaxOutputBytes)
		total += len(k) + len(v)
		out[k] = v
	}
	if len(out) > proto.MaxOutputs || total > proto.MaxOutputBytes {
		return nil, false
	}
	return out, true
}

// plain is clip for the metadata the orchestrator refuses control and
// formatting characters in (hostname, version): they become '?'.
func plain(s string, max int) string {
	return clip(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return '?'
		}
		return r
	}, s), max)
}
