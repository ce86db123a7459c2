package storagetest

import (
	"bytes"
	"io"
	"testing"
)

// A Pattern yields the same bytes however it is read, and chunks differ.
func TestPatternIsTheSameWhateverTheReads(t *testing.T) {
	const n = 3*patternChunk + 123
	want := make([]byte, n)
	for i := range want {
		chunk := i / patternChunk
		rot := int(uint64(chunk) * 2654435761 % patternChunk)
		want[i] = patternBlock[(rot+i%patternChunk)%patternChunk]
	}
	for _, size := range []int{1, 7, 100, patternChunk, patternChunk + 1, 3 * patternChunk, 2 * n} {
		p := NewPattern(n)
		var got bytes.Buffer
		buf := make([]byte, size)
		for {
			k, err := p.Read(buf)
			got.Write(buf[:k])
			if err == io.EOF {
				break
			}
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("reads of %d bytes gave other bytes", size)
		}
	}
	if bytes.Equal(want[:patternChunk], want[patternChunk:2*patternChunk]) {
		t.Fatal("two chunks are the same")
	}
}
