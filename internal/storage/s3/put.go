package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/kilnci/kiln/internal/storage"
)

// firstRead is how much of a body is read before choosing between one
// PutObject and a multipart upload: most objects are small, and a small
// one should not cost a part-sized buffer.
const firstRead = 64 << 10

// Put implements storage.Backend.
func (b *Backend) Put(ctx context.Context, key string, body io.Reader, meta storage.Meta) (storage.Object, error) {
	if err := storage.CheckKey(key); err != nil {
		return storage.Object{}, err
	}
	if err := storage.CheckMeta(meta); err != nil {
		return storage.Object{}, err
	}
	first := make([]byte, firstRead)
	n, err := io.ReadFull(body, first)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return b.putSmall(ctx, key, first[:n], meta)
	}
	if err != nil {
		return storage.Object{}, fmt.Errorf("storage s3: put %s: %w", key, err)
	}
	part := make([]byte, b.part)
	copy(part, first)
	n, err = io.ReadFull(body, part[firstRead:])
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return b.putSmall(ctx, key, part[:firstRead+n], meta)
	}
	if err != nil {
		return storage.Object{}, fmt.Errorf("storage s3: put %s: %w", key, err)
	}
	return b.putMultipart(ctx, key, part, body, meta)
}

// putSmall stores a body that fits in one part with one PutObject.
func (b *Backend) putSmall(ctx context.Context, key string, body []byte, meta storage.Meta) (storage.Object, error) {
	size := int64(len(body))
	out, err := b.client.PutObject(ctx, &awss3.PutObjectInput{
		Bucket: &b.bucket, Key: &key, Body: bytes.NewReader(body), ContentLength: &size, Metadata: meta,
	})
	if err != nil {
		return storage.Object{}, fmt.Errorf("storage s3: put %s: %w", key, err)
	}
	return storage.Object{Key: key, Size: size, ETag: aws.ToString(out.ETag), Modified: time.Now()}, nil
}

type partDone struct {
	part types.CompletedPart
	err  error
}

// putMultipart uploads a body larger than one part: first is the first
// part, full; the rest comes from body. One part uploads while the next
// is read, so two part buffers are all the memory a put holds.
func (b *Backend) putMultipart(ctx context.Context, key string, first []byte, body io.Reader, meta storage.Meta) (storage.Object, error) {
	up, err := b.client.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: &b.bucket, Key: &key, Metadata: meta})
	if err != nil {
		return storage.Object{}, fmt.Errorf("storage s3: put %s: %w", key, err)
	}
	obj, err := b.uploadParts(ctx, key, up.UploadId, first, body)
	if err != nil {
		// The upload's parts cost storage until it is aborted; abort it
		// even when ctx has ended.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, aerr := b.client.AbortMultipartUpload(actx, &awss3.AbortMultipartUploadInput{Bucket: &b.bucket, Key: &key, UploadId: up.UploadId}); aerr != nil {
			b.log.Warn("could not abort a failed multipart upload; its parts stay until the bucket's lifecycle rules remove them",
				"key", key, "error", aerr)
		}
		return storage.Object{}, fmt.Errorf("storage s3: put %s: %w", key, err)
	}
	return obj, nil
}

func (b *Backend) uploadParts(ctx context.Context, key string, uploadID *string, first []byte, body io.Reader) (storage.Object, error) {
	bufs := [2][]byte{first, nil}
	var parts []types.CompletedPart
	var pending chan partDone
	wait := func() error {
		if pending == nil {
			return nil
		}
		d := <-pending
		pending = nil
		if d.err != nil {
			return d.err
		}
		parts = append(parts, d.part)
		return nil
	}
	size, n, cur := int64(0), len(first), 0
	for num := int32(1); ; num++ {
		if num > maxParts {
			wait()
			return storage.Object{}, fmt.Errorf("more than %d parts of %d bytes", maxParts, b.part)
		}
		if err := wait(); err != nil {
			return storage.Object{}, err
		}
		pending = make(chan partDone, 1)
		go b.uploadPart(ctx, key, uploadID, num, bufs[cur][:n], pending)
		size += int64(n)
		if n < int(b.part) {
			break // a short part is the last
		}
		cur ^= 1
		if bufs[cur] == nil {
			bufs[cur] = make([]byte, b.part)
		}
		var err error
		n, err = io.ReadFull(body, bufs[cur])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			wait()
			return storage.Object{}, err
		}
	}
	if err := wait(); err != nil {
		return storage.Object{}, err
	}
	out, err := b.client.CompleteMultipartUpload(ctx, &awss3.CompleteMultipartUploadInput{
		Bucket: &b.bucket, Key: &key, UploadId: uploadID, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		return storage.Object{}, err
	}
	return storage.Object{Key: key, Size: size, ETag: aws.ToString(out.ETag), Modified: time.Now()}, nil
}

func (b *Backend) uploadPart(ctx context.Context, key string, uploadID *string, num int32, data []byte, done chan<- partDone) {
	size := int64(len(data))
	out, err := b.client.UploadPart(ctx, &awss3.UploadPartInput{
		Bucket: &b.bucket, Key: &key, UploadId: uploadID, PartNumber: &num, Body: bytes.NewReader(data), ContentLength: &size,
	})
	if err != nil {
		done <- partDone{err: err}
		return
	}
	done <- partDone{part: types.CompletedPart{ETag: out.ETag, PartNumber: &num}}
}

// Get implements storage.Backend.
func (b *Backend) Get(ctx context.Context, key string) (io.ReadCloser, storage.Object, error) {
	if err := storage.CheckKey(key); err != nil {
		return nil, storage.Object{}, err
	}
	out, err := b.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: &b.bucket, Key: &key})
	if err != nil {
		return nil, storage.Object{}, b.fail("get", key, err)
	}
	return out.Body, object(key, out.ContentLength, out.ETag, out.LastModified, out.Metadata), nil
}
