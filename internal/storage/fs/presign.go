package fs

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/storage"
)

// A presigned URL is BaseURL/<key>?expires=<unix seconds>&sig=<hex
// HMAC-SHA256 of "METHOD\nkey\nexpires" under the secret>: the server
// proxies it (Handler), since a directory has no URL of its own.

// PresignGet implements storage.Backend.
func (b *Backend) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	return b.presign(http.MethodGet, key, ttl)
}

// PresignPut implements storage.Backend.
func (b *Backend) PresignPut(ctx context.Context, key string, ttl time.Duration) (string, error) {
	return b.presign(http.MethodPut, key, ttl)
}

func (b *Backend) presign(method, key string, ttl time.Duration) (string, error) {
	if b.cfg.BaseURL == "" {
		return "", fmt.Errorf("%w: presigned URLs need the server's storage route (no base URL)", storage.ErrUnsupported)
	}
	if err := storage.CheckKey(key); err != nil {
		return "", err
	}
	if ttl <= 0 {
		return "", fmt.Errorf("storage fs: presign %s: ttl %s", key, ttl)
	}
	expires := strconv.FormatInt(b.cfg.Clock().Add(ttl).Unix(), 10)
	q := url.Values{"expires": {expires}, "sig": {b.sign(method, key, expires)}}
	return strings.TrimSuffix(b.cfg.BaseURL, "/") + "/" + escapeKey(key) + "?" + q.Encode(), nil
}

func (b *Backend) sign(method, key, expires string) string {
	m := hmac.New(sha256.New, b.cfg.Secret)
	io.WriteString(m, method+"\n"+key+"\n"+expires)
	return hex.EncodeToString(m.Sum(nil))
}

// escapeKey escapes each segment of key for a URL path.
func escapeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// Handler serves presigned URLs: GET downloads the object, PUT uploads a
// body (at most Config.MaxUploadBytes; 413 above) without metadata. Mount
// it at Config.BaseURL's path with that prefix stripped, e.g.
// mux.Handle("/storage/", http.StripPrefix("/storage", b.Handler())).
// A request without a valid, unexpired signature for its method and key
// is answered 403 and touches nothing.
func (b *Backend) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/")
		if r.Method != http.MethodGet && r.Method != http.MethodPut {
			w.Header().Set("Allow", "GET, PUT")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if err := b.verify(r.Method, key, r.URL.Query()); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		if r.Method == http.MethodGet {
			b.serveGet(w, r, key)
			return
		}
		b.servePut(w, r, key)
	})
}

func (b *Backend) verify(method, key string, q url.Values) error {
	expires, sig := q.Get("expires"), q.Get("sig")
	unix, err := strconv.ParseInt(expires, 10, 64)
	if err != nil || sig == "" {
		return errors.New("malformed presigned URL")
	}
	if !hmac.Equal([]byte(sig), []byte(b.sign(method, key, expires))) {
		return errors.New("bad signature")
	}
	if b.cfg.Clock().Unix() > unix {
		return errors.New("presigned URL expired")
	}
	return nil
}

func (b *Backend) serveGet(w http.ResponseWriter, r *http.Request, key string) {
	body, obj, err := b.Get(r.Context(), key)
	if errors.Is(err, storage.ErrNotFound) {
		http.Error(w, "no such object", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, "storage error", http.StatusInternalServerError)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(obj.Size, 10))
	w.Header().Set("ETag", `"`+obj.ETag+`"`)
	io.Copy(w, body)
}

func (b *Backend) servePut(w http.ResponseWriter, r *http.Request, key string) {
	if r.ContentLength > b.cfg.MaxUploadBytes {
		http.Error(w, fmt.Sprintf("body larger than %d bytes", b.cfg.MaxUploadBytes), http.StatusRequestEntityTooLarge)
		return
	}
	body := http.MaxBytesReader(w, r.Body, b.cfg.MaxUploadBytes)
	obj, err := b.Put(r.Context(), key, body, nil)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		http.Error(w, fmt.Sprintf("body larger than %d bytes", b.cfg.MaxUploadBytes), http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		http.Error(w, "storage error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("ETag", `"`+obj.ETag+`"`)
	w.WriteHeader(http.StatusOK)
}
