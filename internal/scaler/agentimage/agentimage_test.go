package agentimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A dynamically linked kiln is refused (it would not start FROM scratch),
// naming the fix; the root filesystem of a static one holds kiln, busybox
// with its applets as links and git with the libraries ldd lists, and its
// hash depends only on content.
// Proves B188 (docs/behaviours.md).
func TestRootfs(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("SKIPPED: no /bin/busybox (install busybox-static)")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("SKIPPED: no git")
	}
	_, err = Spec{Kiln: git}.Hash()
	if err == nil || !strings.Contains(err.Error(), "dynamically linked; build it with CGO_ENABLED=0") {
		t.Fatalf("a dynamic kiln: %v", err)
	}
	if _, err := (Spec{Kiln: "/no/such/kiln"}).Hash(); err == nil {
		t.Fatal("a missing kiln was accepted")
	}
	// busybox is static: it stands in for kiln here.
	s := Spec{Kiln: "/bin/busybox"}
	var b bytes.Buffer
	sum, err := s.Rootfs(&b)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Hash(); again != sum {
		t.Fatalf("hash %s then %s", sum, again)
	}
	got := map[string]*tar.Header{}
	tr := tar.NewReader(&b)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got["/"+strings.TrimSuffix(h.Name, "/")] = h
	}
	for _, p := range []string{KilnPath, "/bin/busybox", "/usr/bin/git", "/lib64/ld-linux-x86-64.so.2", "/tmp", "/etc/passwd"} {
		if got[p] == nil {
			t.Errorf("%s is not in the image", p)
		}
	}
	if h := got["/bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/bin/busybox" {
		t.Errorf("/bin/sh: %+v", h)
	}
	if h := got["/tmp"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("/tmp: %+v", h)
	}
}
