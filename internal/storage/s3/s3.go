// Package s3 is the storage backend on an S3-compatible object store (AWS
// S3, MinIO, versitygw, Ceph, …) through aws-sdk-go-v2: what every server
// sharing a PostgreSQL database can read.
//
// Bodies are streamed: an object up to one part (8 MiB) is one PutObject,
// a larger one a multipart upload with two part buffers, one filling
// while the other uploads. Metadata is S3 user metadata (x-amz-meta-*).
// UpdateMeta is a self-copy with MetadataDirective=REPLACE on the
// condition that both the copy's source and its destination still have
// the ETag the caller read (B89), so it can never copy an older object's
// metadata over a newer one's; a store that answers 501 to conditional
// copies gets unconditional ones from then on (B92).
package s3

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/logging"

	"github.com/kilnci/kiln/internal/storage"
)

// Defaults and limits of multipart uploads.
const (
	DefaultPartSize = 8 << 20
	minPartSize     = 5 << 20 // S3's smallest part but the last
	maxParts        = 10000   // S3's most parts in one upload
)

// Config configures an S3 backend.
type Config struct {
	// Endpoint is the store's URL, e.g. http://127.0.0.1:7070; empty for
	// AWS S3 in Region.
	Endpoint string
	Bucket   string
	Region   string // default us-east-1
	// PathStyle addresses the bucket as endpoint/bucket/key instead of
	// bucket.endpoint/key; most stores other than AWS need it.
	PathStyle bool
	// AccessKey and SecretKey are the credentials (the server reads them
	// from environment variables).
	AccessKey, SecretKey string
	// PartSize is the size of a multipart upload's parts (default 8 MiB,
	// at least 5 MiB); a Put holds two in memory.
	PartSize int64
	// HTTPClient sends the requests; default the SDK's.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Backend is a storage.Backend on one S3 bucket.
type Backend struct {
	client  *awss3.Client
	presign *awss3.PresignClient
	bucket  string
	part    int64
	log     *slog.Logger
	// conditionalCopy is cleared, for good, the first time the store
	// answers a conditional copy with 501 Not Implemented.
	conditionalCopy atomic.Bool
}

var _ storage.Backend = (*Backend)(nil)

// New returns a backend for cfg's bucket. It sends no request: a store
// that cannot be reached shows on first use.
func New(cfg Config) (*Backend, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("storage s3: no bucket")
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, errors.New("storage s3: no credentials")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.PartSize < minPartSize {
		return nil, fmt.Errorf("storage s3: part size %d is below S3's minimum of %d", cfg.PartSize, minPartSize)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	creds := aws.Credentials{AccessKeyID: cfg.AccessKey, SecretAccessKey: cfg.SecretKey, Source: "kiln configuration"}
	opts := awss3.Options{
		Region:       cfg.Region,
		UsePathStyle: cfg.PathStyle,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return creds, nil
		}),
		// Checksums only where S3 requires them: several S3-compatible
		// stores refuse the SDK's default trailing checksums.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		Logger:                     logging.Nop{},
	}
	if cfg.Endpoint != "" {
		opts.BaseEndpoint = aws.String(strings.TrimSuffix(cfg.Endpoint, "/"))
	}
	if cfg.HTTPClient != nil {
		opts.HTTPClient = cfg.HTTPClient
	}
	client := awss3.New(opts)
	b := &Backend{client: client, presign: awss3.NewPresignClient(client), bucket: cfg.Bucket, part: cfg.PartSize, log: cfg.Logger}
	b.conditionalCopy.Store(true)
	return b, nil
}

// Head implements storage.Backend: the object's metadata and ETag, or
// ErrNotFound on NoSuchKey, NotFound or any 404 (B88).
func (b *Backend) Head(ctx context.Context, key string) (storage.Object, error) {
	if err := storage.CheckKey(key); err != nil {
		return storage.Object{}, err
	}
	out, err := b.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &b.bucket, Key: &key})
	if err != nil {
		return storage.Object{}, b.fail("head", key, err)
	}
	return object(key, out.ContentLength, out.ETag, out.LastModified, out.Metadata), nil
}

// UpdateMeta implements storage.Backend by copying the object onto itself
// with the new metadata, conditional on etag for both the source
// (CopySourceIfMatch) and the destination (IfMatch) (B89). A 412 or a 409
// ConditionalRequestConflict means the object was or is being replaced:
// false, no retry, nothing written (B90, B91). A 501 means the store
// cannot copy conditionally: the copy is retried once without the
// condition, and later ones are sent without it (B92).
func (b *Backend) UpdateMeta(ctx context.Context, key string, meta storage.Meta, etag string) (bool, error) {
	if err := storage.CheckKey(key); err != nil {
		return false, err
	}
	if err := storage.CheckMeta(meta); err != nil {
		return false, err
	}
	conditional := etag != "" && b.conditionalCopy.Load()
	err := b.copyOntoItself(ctx, key, meta, etag, conditional)
	if conditional && isNotImplemented(err) {
		if b.conditionalCopy.Swap(false) {
			b.log.Warn("this S3 store cannot copy conditionally (501): metadata updates are unconditional from now on, "+
				"so a touch may write stale metadata over an object replaced at the same moment", "bucket", b.bucket)
		}
		err = b.copyOntoItself(ctx, key, meta, etag, false)
	}
	switch {
	case err == nil:
		return true, nil
	case isPreconditionFailed(err), isConditionalConflict(err), isNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("storage s3: update metadata of %s: %w", key, err)
}

func (b *Backend) copyOntoItself(ctx context.Context, key string, meta storage.Meta, etag string, conditional bool) error {
	in := &awss3.CopyObjectInput{
		Bucket: &b.bucket, Key: &key, CopySource: aws.String(copySource(b.bucket, key)),
		MetadataDirective: types.MetadataDirectiveReplace, Metadata: meta,
	}
	if conditional {
		in.CopySourceIfMatch = aws.String(etag)
		in.IfMatch = aws.String(etag)
	}
	_, err := b.client.CopyObject(ctx, in)
	return err
}

// copySource is the x-amz-copy-source of key: bucket/key, URL-encoded.
func copySource(bucket, key string) string {
	var sb strings.Builder
	for _, s := range []string{bucket, "/", key} {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~/", c) >= 0 {
				sb.WriteByte(c)
			} else {
				fmt.Fprintf(&sb, "%%%02X", c)
			}
		}
	}
	return sb.String()
}

// Delete implements storage.Backend.
func (b *Backend) Delete(ctx context.Context, key string) error {
	if err := storage.CheckKey(key); err != nil {
		return err
	}
	_, err := b.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: &b.bucket, Key: &key})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("storage s3: delete %s: %w", key, err)
	}
	return nil
}

// List implements storage.Backend with one ListObjectsV2 call; a page
// holds at most 1000 objects whatever the limit.
func (b *Backend) List(ctx context.Context, prefix, after string, limit int) ([]storage.Object, bool, error) {
	if err := storage.CheckPrefix(prefix); err != nil {
		return nil, false, err
	}
	if limit <= 0 {
		return nil, false, fmt.Errorf("storage s3: list limit %d", limit)
	}
	in := &awss3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: &prefix, MaxKeys: aws.Int32(int32(min(limit, 1000)))}
	if after != "" {
		in.StartAfter = &after
	}
	out, err := b.client.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, false, fmt.Errorf("storage s3: list %q: %w", prefix, err)
	}
	objs := make([]storage.Object, 0, len(out.Contents))
	for _, o := range out.Contents {
		objs = append(objs, object(aws.ToString(o.Key), o.Size, o.ETag, o.LastModified, nil))
	}
	more := aws.ToBool(out.IsTruncated) && len(objs) > 0
	return objs, more, nil
}

// PresignGet implements storage.Backend.
func (b *Backend) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	if err := storage.CheckKey(key); err != nil {
		return "", err
	}
	req, err := b.presign.PresignGetObject(ctx, &awss3.GetObjectInput{Bucket: &b.bucket, Key: &key}, awss3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("storage s3: presign %s: %w", key, err)
	}
	return req.URL, nil
}

// PresignPut implements storage.Backend.
func (b *Backend) PresignPut(ctx context.Context, key string, ttl time.Duration) (string, error) {
	if err := storage.CheckKey(key); err != nil {
		return "", err
	}
	req, err := b.presign.PresignPutObject(ctx, &awss3.PutObjectInput{Bucket: &b.bucket, Key: &key}, awss3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("storage s3: presign %s: %w", key, err)
	}
	return req.URL, nil
}

func object(key string, size *int64, etag *string, modified *time.Time, meta map[string]string) storage.Object {
	o := storage.Object{Key: key, Size: aws.ToInt64(size), ETag: aws.ToString(etag), Modified: aws.ToTime(modified)}
	if meta != nil {
		o.Meta = storage.Meta(meta).Clone()
	}
	return o
}

// fail turns an SDK error into the storage package's.
func (b *Backend) fail(op, key string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%w: %s", storage.ErrNotFound, key)
	}
	return fmt.Errorf("storage s3: %s %s: %w", op, key, err)
}

// Check asks the store whether the bucket exists and the credentials may
// use it, for a clear message at start rather than at first use.
func (b *Backend) Check(ctx context.Context) error {
	if _, err := b.client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: &b.bucket}); err != nil {
		return fmt.Errorf("storage s3: bucket %s: %w", b.bucket, err)
	}
	return nil
}
