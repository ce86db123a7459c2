// Package tarball is the format of artifacts (and caches): a gzipped tar
// of regular files with paths relative to a directory. Packing streams;
// unpacking goes through an os.Root, so no name or symlink leads outside
// the directory. Shared by the agent (executor) and the CLI.
package tarball

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// Pack writes files (relative to dir) as a gzipped tar stream.
func Pack(w io.Writer, dir string, files []string) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, rel := range files {
		if err := addFile(tw, dir, rel); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func addFile(tw *tar.Writer, dir, rel string) error {
	f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return nil // replaced since it was listed
	}
	h := &tar.Header{Name: rel, Mode: int64(st.Mode().Perm()), Size: st.Size(), ModTime: st.ModTime(), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.CopyN(tw, f, st.Size())
	return err
}

// Unpack extracts a gzipped tar stream of regular files into dir, through
// an os.Root: a name or a symlink (the checkout may hold some) that would
// lead outside dir is refused, as is anything but a regular file or a
// directory.
func Unpack(r io.Reader, dir string) (files int, size int64, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, 0, err
	}
	defer root.Close()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return 0, 0, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, size, nil
		}
		if err != nil {
			return files, size, err
		}
		name := path.Clean(h.Name)
		if !fs.ValidPath(name) || name == "." {
			return files, size, fmt.Errorf("the archive holds %q, outside the workspace", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return files, size, err
			}
		case tar.TypeReg:
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return files, size, err
				}
			}
			n, err := writeRooted(root, name, tr, os.FileMode(h.Mode).Perm()|0o600)
			size += n
			if err != nil {
				return files, size, err
			}
			files++
		default:
			return files, size, fmt.Errorf("the archive holds %q, which is not a regular file", h.Name)
		}
	}
}

func writeRooted(root *os.Root, name string, r io.Reader, mode os.FileMode) (int64, error) {
	_ = root.Remove(name) // never write through a symlink left there
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}
