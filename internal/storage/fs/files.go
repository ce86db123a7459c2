package fs

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/storage"
)

// Every file of the key tree has a "#" in its name and no directory has:
// keys cannot hold "#" (storage.CheckKey), so the keys "a" and "a/b" map
// to the file a#meta and the directory a/ without colliding.
const (
	sep        = "#"
	metaSuffix = sep + "meta"
)

// objPath is where one key's files live: dir/name#meta and dir/name#<gen>.
type objPath struct{ dir, name string }

func (b *Backend) path(key string) objPath {
	full := filepath.Join(b.objects, filepath.FromSlash(key))
	return objPath{dir: filepath.Dir(full), name: filepath.Base(full)}
}

func (p objPath) meta() string           { return filepath.Join(p.dir, p.name+metaSuffix) }
func (p objPath) body(gen string) string { return filepath.Join(p.dir, p.name+sep+gen) }

// sidecar is the JSON file that commits one version of an object.
type sidecar struct {
	Gen      string       `json:"gen"`
	Size     int64        `json:"size"`
	Modified time.Time    `json:"modified"`
	Meta     storage.Meta `json:"meta,omitempty"`
}

func (s sidecar) object(key string, withMeta bool) storage.Object {
	o := storage.Object{Key: key, Size: s.Size, ETag: s.Gen, Modified: s.Modified}
	if withMeta {
		o.Meta = s.Meta.Clone()
	}
	return o
}

func readSidecar(path string) (sidecar, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return sidecar{}, err
	}
	var s sidecar
	if err := json.Unmarshal(data, &s); err != nil {
		return sidecar{}, err
	}
	return s, nil
}

// writeSidecarTemp writes s to a synced temporary file and returns its
// path, to be renamed into place.
func (b *Backend) writeSidecarTemp(s sidecar) (string, error) {
	data, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	path, _, err := b.writeTemp("meta-*", strings.NewReader(string(data)))
	return path, err
}

// writeTemp streams r into a new synced file in the temporary directory
// (on the same filesystem as the key tree, so a rename moves it) and
// returns its path and size.
func (b *Backend) writeTemp(pattern string, r io.Reader) (string, int64, error) {
	f, err := os.CreateTemp(b.tmp, pattern)
	if err != nil {
		return "", 0, err
	}
	n, err := io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", 0, err
	}
	return f.Name(), n, nil
}

// syncDir makes the renames into dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
