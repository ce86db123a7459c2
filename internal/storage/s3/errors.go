package s3

import (
	"errors"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

// An S3 error is recognised by its code or, when a store sends none (a
// HEAD has no body), by its HTTP status.

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func isError(err error, status int, codes ...string) bool {
	if err == nil {
		return false
	}
	code := errorCode(err)
	for _, c := range codes {
		if code == c {
			return true
		}
	}
	return httpStatus(err) == status
}

// isNotFound: the key is missing. A missing bucket is a 404 too, but an
// error of the configuration, not an absent object.
func isNotFound(err error) bool {
	return errorCode(err) != "NoSuchBucket" && isError(err, 404, "NoSuchKey", "NotFound")
}

func isPreconditionFailed(err error) bool { return isError(err, 412, "PreconditionFailed") }

func isConditionalConflict(err error) bool { return isError(err, 409, "ConditionalRequestConflict") }

func isNotImplemented(err error) bool { return isError(err, 501, "NotImplemented") }
