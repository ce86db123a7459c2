package executor

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/waittest"
)

// checkSeq asserts a step's lines are numbered 1, 2, 3 … with no gap.
func checkSeq(t *testing.T, lines []LogLine) {
	t.Helper()
	for i, l := range lines {
		if l.Seq != uint64(i+1) {
			t.Fatalf("line %d has seq %d", i, l.Seq)
		}
	}
}

func TestLogIsCappedWithTruncationLine(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	// 20 MB: 200,000 lines of 99 bytes plus a newline.
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{
		{Run: `yes '` + strings.Repeat("x", 99) + `' | head -n 200000; echo after`},
		{Run: "echo next step"},
	}})
	wantStatuses(t, res, success, success)
	lines := rec.lines(0)
	checkSeq(t, lines)
	var shown int64
	for _, l := range lines[:len(lines)-1] {
		shown += int64(len(l.Text)) + 1
		if l.Text != strings.Repeat("x", 99) {
			t.Fatalf("unexpected line %q", l.Text)
		}
	}
	if shown > DefaultMaxLogBytesPerStep || shown < DefaultMaxLogBytesPerStep-100 {
		t.Errorf("shown %d bytes, cap %d", shown, DefaultMaxLogBytesPerStep)
	}
	last := lines[len(lines)-1]
	total := int64(200000*100 + len("after\n"))
	want := fmt.Sprintf("[kiln] log truncated: step output exceeded 10 MiB; %d more bytes not shown", total-shown)
	if last.Text != want || last.Stream != StreamSystem {
		t.Errorf("last line = %q, want %q", last.Text, want)
	}
	if res.Steps[0].LogBytes != total {
		t.Errorf("LogBytes = %d, want %d", res.Steps[0].LogBytes, total)
	}
	if rec.text(1) != "next step\n" {
		t.Errorf("the cap leaked into the next step: %q", rec.text(1))
	}
}

func TestLogBatching(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.BatchInterval = 50 * time.Millisecond })
	gate := filepath.Join(t.TempDir(), "gate")
	rec2 := &recorder{}
	e := x.Start(t.Context(), &Job{JobID: "j", JobEnv: map[string]string{"GATE": gate}, Steps: []Step{
		{Run: `i=0; while [ $i -lt 120 ]; do echo "line $i"; i=$((i+1)); done; sleep 0.3; echo alone; while [ ! -e "$GATE" ]; do sleep 0.01; done; echo last`},
	}}, rec2)
	waittest.Until(t, 10*time.Second, "the lone line", func() bool { return strings.Contains(rec2.text(0), "alone\n") })
	writeFile(t, gate, "")
	e.Wait()
	rec2.mu.Lock()
	defer rec2.mu.Unlock()
	var sizes []int
	for _, b := range rec2.batches {
		if len(b.Lines) > DefaultBatchLines {
			t.Errorf("batch of %d lines", len(b.Lines))
		}
		sizes = append(sizes, len(b.Lines))
	}
	if len(sizes) < 5 || sizes[0] != 50 || sizes[1] != 50 {
		t.Errorf("batch sizes = %v", sizes)
	}
	if sizes[len(sizes)-1] != 1 || sizes[len(sizes)-2] != 1 {
		t.Errorf("the last two lines should come alone: %v", sizes)
	}
}

// Proves B57 (docs/behaviours.md).
func TestLogStreamsAndLongLines(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.MaxLineBytes = 1000 })
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{
		{Run: `echo out; echo err >&2; printf 'crlf\r\n'; head -c 2500 /dev/zero | tr '\0' y; printf 'no newline at end'`},
	}})
	wantStatuses(t, res, success)
	lines := rec.lines(0)
	checkSeq(t, lines)
	// The two streams are read concurrently: order holds within a stream.
	var out, errs []string
	for _, l := range lines {
		if l.Stream == StreamStderr {
			errs = append(errs, l.Text)
		} else {
			out = append(out, strconv.Itoa(len(l.Text)))
		}
	}
	// out, crlf, then 2500 y's cut at 1000 bytes, with the unterminated
	// rest of the output joined to the last piece.
	if got := fmt.Sprint(out); got != "[3 4 1000 1000 517]" {
		t.Errorf("stdout line lengths = %s", got)
	}
	if fmt.Sprint(errs) != "[err]" {
		t.Errorf("stderr = %q", errs)
	}
	var stdout []LogLine
	for _, l := range lines {
		if l.Stream == StreamStdout {
			stdout = append(stdout, l)
		}
	}
	if stdout[1].Text != "crlf" || !strings.HasSuffix(stdout[4].Text, "no newline at end") {
		t.Errorf("lines = %q / %q", stdout[1].Text, stdout[4].Text)
	}
}

// Proves B58 (docs/behaviours.md).
func TestSecretsAreMaskedEvenInPieces(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	const secret = "hunter2-Sup3rSecret"
	const multi = "first-line-secret\nsecond-line-secret"
	b64 := base64.StdEncoding.EncodeToString([]byte(secret))
	res, rec := runJob(t, x, &Job{JobID: "j",
		Secrets: map[string]string{"TOKEN": secret, "CERT": multi, "SHORT": "ab"},
		JobEnv:  map[string]string{"TOKEN": secret},
		Steps: []Step{
			{Run: `printf 'the token is hunt'; sleep 0.2; printf 'er2-Sup3r'; sleep 0.1; printf 'Secret!\n'
printf 'hunter2-' >&2; sleep 0.1; printf 'Sup3rSecret\n' >&2
echo "$TOKEN" | base64
printf 'first-line-secret\nsecond-line-secret\n'
echo "ab stays visible"
echo "twice: $TOKEN$TOKEN."
exit 1`},
		}})
	wantStatuses(t, res, failed)
	all := rec.allText()
	for _, leak := range []string{secret, "hunter2", "Sup3rSecret", b64, "first-line-secret", "second-line-secret"} {
		if strings.Contains(all, leak) {
			t.Errorf("log shows %q:\n%s", leak, all)
		}
	}
	lines := rec.lines(0)
	var got []string
	for _, l := range lines {
		got = append(got, l.Text)
	}
	slices.Sort(got) // stdout and stderr interleave in any order
	// "echo $TOKEN | base64" also encodes the newline: the end of its
	// encoding is not the secret's.
	want := []string{"***", "***", "***", "***o=", "ab stays visible", "the token is ***!", "twice: ***."}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines = %q\nwant    %q", got, want)
	}
}

func TestSecretMaskedAcrossLongLineCut(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.MaxLineBytes = 256 })
	const secret = "0123456789-secret-abcdefghij"
	// The secret straddles byte 256 of a line with no newline.
	res, rec := runJob(t, x, &Job{JobID: "j", Secrets: map[string]string{"S": secret}, Steps: []Step{
		{Run: `head -c 240 /dev/zero | tr '\0' a; printf '` + secret + `'; head -c 600 /dev/zero | tr '\0' b; echo`},
	}})
	wantStatuses(t, res, success)
	all := rec.allText()
	if strings.Contains(all, "secret") || !strings.Contains(all, "***") {
		t.Errorf("log = %q", all)
	}
}

// TestHostileBranchIsPrintedNotExecuted: an expression in run: reaches the
// script as an environment variable, never as code.
// Proves B76 (docs/behaviours.md).
func TestHostileBranchIsPrintedNotExecuted(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	marker := filepath.Join(t.TempDir(), "pwned")
	branch := `x"; touch ` + marker + `; echo "$(touch ` + marker + `)` + "`touch " + marker + "`'"
	res, rec := runJob(t, x, &Job{JobID: "j",
		Contexts: map[string]any{"event": map[string]any{"branch": branch}},
		Steps: []Step{
			{Run: `echo "branch: ${{ event.branch }}"`},
			{Run: `echo ${{ event.branch }}`},
			{Shell: "bash", Run: `printf '%s\n' '${{ event.branch }}'`},
		}})
	wantStatuses(t, res, success, success, success)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the branch name was executed")
	}
	if got := rec.text(0); got != "branch: "+branch+"\n" {
		t.Errorf("quoted: %q", got)
	}
	if got := rec.text(1); got != branch+"\n" {
		t.Errorf("unquoted: %q", got)
	}
	// Inside single quotes the reference is not expanded: printed as is,
	// still not executed.
	if got := rec.text(2); got != "${KILN_EXPR_1}\n" {
		t.Errorf("single-quoted: %q", got)
	}
}

// slowSink blocks on each batch, like a sink whose network is slow.
type slowSink struct {
	recorder
	delay time.Duration
}

func (s *slowSink) Log(b LogBatch) {
	time.Sleep(s.delay)
	s.recorder.Log(b)
}

func TestSlowSinkLosesNothing(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.LogBufferBytes = 4096 })
	sink := &slowSink{delay: time.Millisecond}
	res := x.Start(t.Context(), &Job{JobID: "j", Steps: []Step{
		{Run: `i=0; while [ $i -lt 3000 ]; do echo "line $i"; i=$((i+1)); done`},
	}}, sink).Wait()
	wantStatuses(t, res, success)
	lines := sink.lines(0)
	checkSeq(t, lines)
	if len(lines) != 3000 || lines[2999].Text != "line 2999" {
		t.Fatalf("%d lines", len(lines))
	}
}

// readAll runs input through a stepLog, written in the given pieces, and
// returns the lines it produced.
func readAll(t *testing.T, m *masker, maxLine int, pieces []string) []string {
	rec := &recorder{}
	em := newEmitter(rec, 1<<20)
	l := &stepLog{em: em, masker: m, clock: time.Now, maxBytes: 1 << 30, maxLine: maxLine, lines: 50, interval: time.Hour}
	r, w := io.Pipe()
	go func() {
		for _, p := range pieces {
			w.Write([]byte(p))
		}
		w.Close()
	}()
	l.read(r, StreamStdout)
	l.close()
	em.close()
	var out []string
	for _, line := range rec.lines(0) {
		out = append(out, line.Text)
	}
	return out
}

// FuzzLogLines: however output is split into writes, it becomes the same
// lines, and a secret never shows.
func FuzzLogLines(f *testing.F) {
	f.Add("hello\nworld\r\npartial", "secret-value", uint8(3), 300)
	f.Add(strings.Repeat("a", 290)+"secret-value"+strings.Repeat("b", 50)+"\n", "secret-value", uint8(7), 256)
	f.Add(strings.Repeat("x", 256)+"\r\n", "zzz", uint8(1), 256)
	f.Add(strings.Repeat("a", 250)+"secret-value"+strings.Repeat("b", 300), "secret-value", uint8(1), 256)
	f.Fuzz(func(t *testing.T, input, secret string, step uint8, maxLine int) {
		if maxLine < 256 || maxLine > 4096 || len(input) > 1<<14 {
			return
		}
		m := newMasker([]string{secret})
		whole := readAll(t, m, maxLine, []string{input})
		var pieces []string
		n := int(step%16) + 1
		for i := 0; i < len(input); i += n {
			pieces = append(pieces, input[i:min(i+n, len(input))])
		}
		split := readAll(t, m, maxLine, pieces)
		if fmt.Sprint(whole) != fmt.Sprint(split) {
			t.Fatalf("written whole: %q\nin pieces of %d: %q", whole, n, split)
		}
		for _, line := range whole {
			if len(line) > maxLine+len(maskText)*(maxLine/3+1) {
				t.Fatalf("line of %d bytes", len(line))
			}
			if !m.empty() && len(secret) >= MinSecretLen && strings.TrimSpace(secret) != "" &&
				!strings.Contains(secret, "\n") && !strings.Contains(secret, "\r") &&
				strings.Contains(strings.ReplaceAll(line, maskText, "\x00"), secret) {
				t.Fatalf("secret %q shows in %q", secret, line)
			}
		}
	})
}
