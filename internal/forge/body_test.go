package forge

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// A body over the in-memory bound is spooled to an unlinked file, holds
// only the bound in memory, verifies like one in memory, and reads back
// whole; the size rules are ReadBody's.
//
// B103: unverified webhook bodies hold bounded memory.
func TestReadPayloadSpoolsLargeBodies(t *testing.T) {
	dir := t.TempDir()
	lim := BodyLimits{Max: 1 << 20, InMemory: 4 << 10, SpoolDir: dir}
	secret := []byte("s3cret")
	for _, size := range []int{0, 10, 4 << 10, 4<<10 + 1, 1 << 20} {
		body := bytes.Repeat([]byte("b"), size)
		for _, declared := range []int64{int64(size), -1} {
			p, err := readPayload(bytes.NewReader(body), declared, lim)
			if err != nil {
				t.Fatalf("size %d declared %d: %v", size, declared, err)
			}
			if spooled := p.file != nil; spooled != (size > 4<<10) || len(p.mem) > 4<<10+1 {
				t.Fatalf("size %d: spooled %v, %d bytes in memory", size, spooled, len(p.mem))
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Fatalf("size %d: the spool file is still linked", size)
			}
			if err := verifyPrefixed(secret, p, "X-Sig", Sign(secret, body), true); err != nil {
				t.Fatalf("size %d: a good signature: %v", size, err)
			}
			if err := verifyPrefixed([]byte("other"), p, "X-Sig", Sign(secret, body), true); err == nil {
				t.Fatalf("size %d: a wrong signature passed", size)
			}
			if got, err := p.bytes(); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("size %d: read back %d bytes, %v", size, len(got), err)
			}
			p.close()
		}
	}
	for _, c := range []struct {
		body     io.Reader
		declared int64
		code     kiln.Code
	}{
		{strings.NewReader("x"), 2 << 20, kiln.CodeTooLarge},
		{io.LimitReader(endlessZeros{}, 2<<20), -1, kiln.CodeTooLarge},
		{strings.NewReader(strings.Repeat("x", 10<<10)), 20 << 10, kiln.CodeInvalid},
		{strings.NewReader("abc"), 5, kiln.CodeInvalid},
		{io.MultiReader(strings.NewReader(strings.Repeat("x", 8<<10)), failingReader{}), -1, kiln.CodeInvalid},
	} {
		if _, err := readPayload(c.body, c.declared, lim); kiln.ErrorCode(err) != c.code {
			t.Fatalf("declared %d: %v, want %s", c.declared, err, c.code)
		}
	}
}

type endlessZeros struct{}

func (endlessZeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}
