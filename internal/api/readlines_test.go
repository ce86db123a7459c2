package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// readLines hands over every line whole and without its newline, whether it
// sits in the reader's buffer (no copy) or spans several fills of it, and
// a last line without a newline is a cut stream.
func TestReadLinesRaw(t *testing.T) {
	want := []string{`{"seq":1}`, `{"seq":2,"text":"` + strings.Repeat("x", 100) + `"}`, `{"seq":3}`, strings.Repeat("y", 40)}
	data := strings.Join(want, "\n") + "\n"
	var got []string
	err := readLines(context.Background(), bufio.NewReaderSize(strings.NewReader(data), 16), func(b []byte) error {
		got = append(got, string(b))
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q", got)
	}
	err = readLines(context.Background(), bufio.NewReaderSize(strings.NewReader(`{"seq":1}`+"\n"+`{"seq":2`), 16), func([]byte) error { return nil }, nil)
	if kiln.ErrorCode(err) != kiln.CodeUnavailable {
		t.Fatalf("a cut stream: %v", err)
	}
}

// chunks is a reader that returns one of its strings per Read, as a
// network stream delivers what arrived together.
type chunks []string

func (c *chunks) Read(p []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	if n < len((*c)[0]) {
		(*c)[0] = (*c)[0][n:]
	} else {
		*c = (*c)[1:]
	}
	return n, nil
}

// Idle comes once per burst: after every line that arrived together was
// handed over, before the reader waits for more — where `kiln logs -f`
// flushes its output.
func TestReadLinesIdleOncePerBurst(t *testing.T) {
	src := chunks{"{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3}\n", "{\"seq\":4}\n{\"seq\":5}\n"}
	lines, idles := 0, []int{}
	err := readLines(context.Background(), bufio.NewReader(&src), func([]byte) error { lines++; return nil },
		func() error { idles = append(idles, lines); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(idles) != "[0 3 5]" {
		t.Fatalf("idle after %v lines, want [0 3 5]", idles)
	}
}
