// Package agentimage builds the container image docker scalers run: FROM
// scratch, the static kiln binary, busybox (Debian's busybox-static) for
// the steps' shell and tools, and git with the shared libraries ldd lists
// for the checkout. There is no registry involved: the root filesystem is
// written as a tar and imported into the local Docker Engine (`docker
// import`), tagged by a hash of its content so an unchanged image is not
// imported twice.
package agentimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Spec says which host files go into the image.
type Spec struct {
	// Kiln is the kiln executable; it must be static (CGO_ENABLED=0).
	Kiln string
	// Busybox is a static busybox (default /bin/busybox).
	Busybox string
	// Git is the git executable (default: git on PATH); "-" leaves git
	// out (steps then cannot check out).
	Git string
	// CACerts is the CA bundle for https clones (default Debian's, when
	// present).
	CACerts string
}

// Image paths.
const (
	KilnPath = "/usr/local/bin/kiln"
	PathEnv  = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
)

// file is one entry of the root filesystem.
type file struct {
	name string // absolute, in the image
	src  string // host path ("" for a directory or symlink)
	link string // symlink target
	mode int64
	data []byte // literal content
}

// files lists the image's root filesystem, sorted so the tar (and its
// hash) depends only on content.
func (s Spec) files() ([]file, error) {
	if s.Busybox == "" {
		s.Busybox = "/bin/busybox"
	}
	if s.CACerts == "" {
		if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
			s.CACerts = "/etc/ssl/certs/ca-certificates.crt"
		}
	}
	if err := static(s.Kiln, "the kiln binary", "build it with CGO_ENABLED=0 go build ./cmd/kiln"); err != nil {
		return nil, err
	}
	if err := static(s.Busybox, "busybox", "install Debian's busybox-static"); err != nil {
		return nil, err
	}
	fs := []file{
		{name: "/tmp", mode: 0o1777}, {name: "/root", mode: 0o700}, {name: "/var/lib/kiln-agent", mode: 0o700},
		{name: "/etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{name: "/etc/group", mode: 0o644, data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{name: KilnPath, src: s.Kiln, mode: 0o755},
		{name: "/bin/busybox", src: s.Busybox, mode: 0o755},
	}
	out, err := exec.Command(s.Busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox's applets: %v", err)
	}
	for _, a := range strings.Fields(string(out)) {
		if a == "bin/busybox" {
			continue
		}
		fs = append(fs, file{name: "/" + a, link: "/bin/busybox"})
	}
	if s.CACerts != "" {
		fs = append(fs, file{name: "/etc/ssl/certs/ca-certificates.crt", src: s.CACerts, mode: 0o644})
	}
	if s.Git != "-" {
		g, err := gitFiles(s.Git)
		if err != nil {
			return nil, err
		}
		fs = append(fs, g...)
	}
	// A later entry (git's) wins over a busybox applet of the same name.
	slices.SortStableFunc(fs, func(a, b file) int { return strings.Compare(a.name, b.name) })
	var uniq []file
	for i, f := range fs {
		if i+1 < len(fs) && fs[i+1].name == f.name {
			continue
		}
		uniq = append(uniq, f)
	}
	return uniq, nil
}

// gitFiles are git, its https helper and the libraries both load.
func gitFiles(git string) ([]file, error) {
	if git == "" {
		p, err := exec.LookPath("git")
		if err != nil {
			return nil, errors.New("git is not installed on this host (give --git PATH, or --git - to leave it out)")
		}
		git = p
	}
	git, err := filepath.EvalSymlinks(git)
	if err != nil {
		return nil, err
	}
	// git runs its transport helpers by name: git-upload-pack for a
	// file:// or ssh fetch is git itself under that name.
	fs := []file{{name: "/usr/bin/git", src: git, mode: 0o755}, {name: "/usr/share/git-core/templates", mode: 0o755}}
	for _, h := range []string{"git-upload-pack", "git-receive-pack", "git-upload-archive"} {
		fs = append(fs, file{name: "/usr/bin/" + h, link: "git"}, file{name: "/usr/lib/git-core/" + h, link: "/usr/bin/git"})
	}
	bins := []string{git}
	core := "/usr/lib/git-core"
	if h := filepath.Join(core, "git-remote-http"); exists(h) {
		fs = append(fs, file{name: h, src: h, mode: 0o755}, file{name: core + "/git-remote-https", link: "git-remote-http"})
		bins = append(bins, h)
	}
	seen := map[string]bool{}
	for _, b := range bins {
		libs, err := ldd(b)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			if !seen[l] {
				seen[l] = true
				fs = append(fs, file{name: l, src: l, mode: 0o755})
			}
		}
	}
	return fs, nil
}

// ldd lists the absolute paths of the libraries (and the loader) a
// dynamic executable loads, as ldd resolves them on this host.
func ldd(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %v", bin, err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs, nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// StaticELF reports whether the executable at path is statically linked
// (an ELF file without a program interpreter), as a VM or scratch image
// without the host's libraries needs.
func StaticELF(path string) bool { return static(path, "executable", "") == nil }

// static refuses an executable with a program interpreter: it would not
// start in an image that lacks the host's libraries.
func static(p, what, hint string) error {
	if p == "" {
		return fmt.Errorf("%s: no path given", what)
	}
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("%s %s: %v", what, p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s %s is dynamically linked; %s", what, p, hint)
		}
	}
	return nil
}

// Rootfs writes the image's root filesystem as a tar to w and returns the
// hash of its content (hex SHA-256).
func (s Spec) Rootfs(w io.Writer) (string, error) {
	fs, err := s.files()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(w, h))
	dirs := map[string]bool{"/": true}
	mkdirs := func(p string) error {
		var missing []string
		for d := path.Dir(p); !dirs[d]; d = path.Dir(d) {
			missing = append(missing, d)
			dirs[d] = true
		}
		slices.Reverse(missing)
		for _, d := range missing {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, f := range fs {
		if err := mkdirs(f.name); err != nil {
			return "", err
		}
		name := strings.TrimPrefix(f.name, "/")
		switch {
		case f.link != "":
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: f.link, Mode: 0o777})
		case f.src == "" && f.data == nil:
			dirs[f.name] = true
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: f.mode})
		default:
			data := f.data
			if f.src != "" {
				if data, err = os.ReadFile(f.src); err != nil {
					return "", err
				}
			}
			if err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: f.mode, Size: int64(len(data))}); err == nil {
				_, err = tw.Write(data)
			}
		}
		if err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Hash is the content hash Rootfs would return, without keeping the tar.
func (s Spec) Hash() (string, error) {
	return s.Rootfs(io.Discard)
}

// buffer builds the tar in memory (an image is tens of MB).
func (s Spec) buffer() (*bytes.Buffer, string, error) {
	var b bytes.Buffer
	sum, err := s.Rootfs(&b)
	return &b, sum, err
}

// Changes are the image settings `docker import` applies.
func Changes(sum string) []string {
	return []string{
		"ENV PATH=" + PathEnv,
		"ENV HOME=/root",
		`ENTRYPOINT ["kiln"]`,
		"WORKDIR /",
		"LABEL io.kilnci.agent-image=" + sum,
	}
}
