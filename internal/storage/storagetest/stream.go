package storagetest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/kilnci/kiln/internal/storage"
)

// LargeSize is the body the streaming test moves: large enough that
// buffering it whole would show, small enough for a test.
const LargeSize = 64 << 20

// Pattern is a reproducible body of n bytes that is never in memory whole.
// It is made of 4 KiB chunks, each a rotation of one fixed block by an
// amount that depends on the chunk's index, so a lost, repeated or
// reordered chunk changes the digest; it is produced by copying, which
// stays fast under the race detector.
type Pattern struct{ off, n int64 }

// NewPattern returns a Pattern of n bytes.
func NewPattern(n int64) *Pattern { return &Pattern{n: n} }

const patternChunk = 4096

var patternBlock = func() []byte {
	b := make([]byte, patternChunk)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}()

func (p *Pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	done := 0
	for done < len(b) {
		chunk, within := p.off/patternChunk, int(p.off%patternChunk)
		rot := int(uint64(chunk) * 2654435761 % patternChunk)
		// Byte i of the chunk is patternBlock[(rot+i) % patternChunk].
		start := (rot + within) % patternChunk
		k := copy(b[done:min(len(b), done+patternChunk-within)], patternBlock[start:])
		if k < patternChunk-within && done+k < len(b) {
			k += copy(b[done+k:min(len(b), done+patternChunk-within)], patternBlock[:start])
		}
		done += k
		p.off += int64(k)
	}
	return done, nil
}

// allocated returns the bytes the process allocated while fn ran.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A 64 MiB object goes in and out whole, and neither direction allocates
// anything near its size: the body is streamed, not buffered.
func testLargeStreamed(t *testing.T, b storage.Backend) {
	want := sha256.New()
	io.Copy(want, NewPattern(LargeSize))
	var obj storage.Object
	var err error
	n := allocated(func() { obj, err = b.Put(ctx(t), "large/object", NewPattern(LargeSize), storage.Meta{"kind": "large"}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("put of %d MiB allocated %.1f MiB", LargeSize>>20, float64(n)/(1<<20))
	if n > LargeSize/2 {
		t.Errorf("put of a %d MiB body allocated %.1f MiB: it is buffered, not streamed", LargeSize>>20, float64(n)/(1<<20))
	}
	if obj.Size != LargeSize || head(t, b, "large/object").Size != LargeSize {
		t.Fatalf("size %d, head %d", obj.Size, head(t, b, "large/object").Size)
	}
	got := sha256.New()
	var read int64
	n = allocated(func() {
		r, _, gerr := b.Get(ctx(t), "large/object")
		if err = gerr; err != nil {
			return
		}
		defer r.Close()
		read, err = io.Copy(got, r)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("get of %d MiB allocated %.1f MiB", LargeSize>>20, float64(n)/(1<<20))
	if n > LargeSize/2 {
		t.Errorf("get of a %d MiB body allocated %.1f MiB: it is buffered, not streamed", LargeSize>>20, float64(n)/(1<<20))
	}
	if read != LargeSize || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("read %d bytes back, digest differs: %v", read, !bytes.Equal(got.Sum(nil), want.Sum(nil)))
	}
}

// Writers put whole versions of one key at once while readers read it:
// every read is one version whole, with that version's metadata, and so
// is what is left at the end.
func testConcurrentPuts(t *testing.T, b storage.Backend) {
	const writers, rounds, size = 4, 3, 256 << 10
	version := func(c byte) string { return strings.Repeat(string(c), size) }
	put(t, b, "race/key", version('A'), storage.Meta{"v": "A"})
	check := func(body string, meta storage.Meta) error {
		if len(body) != size || body != version(body[0]) || meta["v"] != body[:1] {
			return fmt.Errorf("torn read: %d bytes starting %q, meta %v", len(body), body[:min(len(body), 8)], meta)
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers+2)
	done := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				c := byte('a' + w*rounds + r)
				if _, err := b.Put(ctx(t), "race/key", strings.NewReader(version(c)), storage.Meta{"v": string(c)}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				r, obj, err := b.Get(ctx(t), "race/key")
				if err != nil {
					errs <- err
					return
				}
				data, err := io.ReadAll(r)
				r.Close()
				if err == nil {
					err = check(string(data), obj.Meta)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	body, obj := get(t, b, "race/key")
	if err := check(body, obj.Meta); err != nil || body[0] == 'A' {
		t.Fatalf("after the puts: %v, version %q", err, body[:1])
	}
}
