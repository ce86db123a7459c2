package tarball

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func archive(t *testing.T, entries map[string]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	zw.Close()
	return &buf
}

// B208: an entry that would land outside the directory — by its name, or
// through a symlink already in the directory — is refused and writes
// nothing outside it; a packed tree unpacks as it was.
func TestUnpackStaysInsideTheDirectory(t *testing.T) {
	outside := t.TempDir()
	for _, name := range []string{"../escape", "/abs/escape", "a/../../escape"} {
		dir := t.TempDir()
		if _, _, err := Unpack(archive(t, map[string]string{name: "x"}), dir); err == nil {
			t.Errorf("%q was unpacked", name)
		}
	}
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Unpack(archive(t, map[string]string{"link/planted": "x"}), dir); err == nil {
		t.Error("an entry through a symlink was unpacked")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("a file was written outside the directory through a symlink")
	}

	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(src, "a", "b", "c.txt"), []byte("deep"), 0o640)
	os.WriteFile(filepath.Join(src, "top"), []byte(strings.Repeat("t", 100000)), 0o755)
	var buf bytes.Buffer
	if err := Pack(&buf, src, []string{"a/b/c.txt", "top"}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	files, size, err := Unpack(&buf, dst)
	if err != nil || files != 2 || size != 100004 {
		t.Fatalf("unpacked %d files, %d bytes, %v", files, size, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a", "b", "c.txt")); string(b) != "deep" {
		t.Fatalf("c.txt = %q", b)
	}
	if st, _ := os.Stat(filepath.Join(dst, "top")); st == nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("top's mode: %v", st)
	}
}

// FuzzUnpack feeds arbitrary bytes as an artifact: Unpack returns an error
// or unpacks, never panics, and never writes outside its directory (B208).
func FuzzUnpack(f *testing.F) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "a/b", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("x"))
	tw.Close()
	zw.Close()
	f.Add(buf.Bytes())
	f.Add([]byte("not gzip"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "in")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_, _, _ = Unpack(bytes.NewReader(data), dir)
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 {
			t.Fatalf("Unpack wrote beside its directory: %v", ents)
		}
	})
}
