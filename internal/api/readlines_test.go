package api

import (
	"bufio"
	"context"
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
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q", got)
	}
	err = readLines(context.Background(), bufio.NewReaderSize(strings.NewReader(`{"seq":1}`+"\n"+`{"seq":2`), 16), func([]byte) error { return nil })
	if kiln.ErrorCode(err) != kiln.CodeUnavailable {
		t.Fatalf("a cut stream: %v", err)
	}
}
