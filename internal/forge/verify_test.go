package forge

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

var testSecret = []byte("It's a Secret to Everybody")

// payloads returns the real GitHub webhook bodies in testdata.
func payloads(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/github-webhooks/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no payloads: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

// wantVerify checks err is a 401 verification error for reason, and that
// its message gives away neither the secret nor the expected MAC.
func wantVerify(t *testing.T, err, reason error, secret, body []byte) {
	t.Helper()
	if !errors.Is(err, reason) {
		t.Fatalf("err = %v, want %v", err, reason)
	}
	wantCode(t, err, kiln.CodeUnauthorized)
	msg := kiln.ErrorMessage(err)
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	if (len(secret) > 0 && strings.Contains(msg, string(secret))) || strings.Contains(msg, hex.EncodeToString(m.Sum(nil))) {
		t.Fatalf("message leaks the secret or the expected MAC: %s", msg)
	}
}

// Proves B1 (docs/behaviours.md).
func TestVerifyGitHubRealPayloads(t *testing.T) {
	// GitHub's documented example: secret "It's a Secret to Everybody",
	// payload "Hello, World!".
	const docSig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if err := VerifyGitHub(testSecret, []byte("Hello, World!"), docSig); err != nil {
		t.Fatalf("GitHub's documented example: %v", err)
	}
	for name, body := range payloads(t) {
		t.Run(name, func(t *testing.T) {
			sig := Sign(testSecret, body)
			if err := VerifyGitHub(testSecret, body, sig); err != nil {
				t.Fatalf("good signature: %v", err)
			}
			if err := VerifyGitHub(testSecret, body, strings.ToUpper(sig[:7])+strings.ToUpper(sig[7:])); err == nil {
				t.Fatal("an upper-case prefix was accepted")
			}
			wantVerify(t, VerifyGitHub([]byte("other secret"), body, sig), ErrWrongSignature, []byte("other secret"), body)
			tampered := append([]byte(nil), body...)
			tampered[len(tampered)/2] ^= 1
			wantVerify(t, VerifyGitHub(testSecret, tampered, sig), ErrWrongSignature, testSecret, tampered)
			wantVerify(t, VerifyGitHub(testSecret, body[:len(body)-1], sig), ErrWrongSignature, testSecret, body)
			wantVerify(t, VerifyGitHub(testSecret, body, ""), ErrNoSignature, testSecret, body)
			for _, bad := range []string{sig[7:], "sha1=" + sig[7:], "sha256=", "sha256=zz" + sig[9:], sig[:len(sig)-2], sig + "00"} {
				wantVerify(t, VerifyGitHub(testSecret, body, bad), ErrMalformedSignature, testSecret, body)
			}
		})
	}
}

// Proves B4 (docs/behaviours.md).
func TestVerifyGitea(t *testing.T) {
	body := payloads(t)["push.payload.json"]
	bare := Sign(testSecret, body)[len("sha256="):]
	for _, h := range []http.Header{
		{HeaderGiteaSignature: {bare}},
		{HeaderForgejoSignature: {bare}},
		{HeaderGitHubSignature: {"sha256=" + bare}},
		{HeaderGiteaSignature: {strings.ToUpper(bare)}},
	} {
		if err := VerifyGitea(testSecret, body, h); err != nil {
			t.Errorf("%v: %v", h, err)
		}
	}
	wantVerify(t, VerifyGitea(testSecret, body, http.Header{}), ErrNoSignature, testSecret, body)
	wantVerify(t, VerifyGitea([]byte("x"), body, http.Header{HeaderGiteaSignature: {bare}}), ErrWrongSignature, []byte("x"), body)
	wantVerify(t, VerifyGitea(testSecret, body, http.Header{HeaderGiteaSignature: {"sha256=" + bare}}), ErrMalformedSignature, testSecret, body)
	// The Gitea header is the one checked when several are sent.
	wantVerify(t, VerifyGitea(testSecret, body, http.Header{HeaderGiteaSignature: {strings.Repeat("0", 64)}, HeaderGitHubSignature: {"sha256=" + bare}}), ErrWrongSignature, testSecret, body)
}

// Proves B3 (docs/behaviours.md).
func TestVerifyHMACAndBearer(t *testing.T) {
	body := []byte(`{"ref":"main"}`)
	sig := Sign(testSecret, body)
	for _, v := range []string{sig, sig[len("sha256="):]} {
		if err := VerifyHMAC(testSecret, body, "X-Signature-256", v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	wantVerify(t, VerifyHMAC(testSecret, body, "X-Signature-256", ""), ErrNoSignature, testSecret, body)
	wantVerify(t, VerifyHMAC(testSecret, body, "X-Signature-256", "sha256=nothex"), ErrMalformedSignature, testSecret, body)
	wantVerify(t, VerifyHMAC(testSecret, []byte(`{"ref":"evil"}`), "X-Signature-256", sig), ErrWrongSignature, testSecret, body)
	wantVerify(t, VerifyHMAC(nil, body, "X-Signature-256", sig), ErrWrongSignature, testSecret, body)
	if err := VerifyHMAC(testSecret, body, "X-My-Sig", ""); !strings.Contains(err.Error(), "X-My-Sig") {
		t.Errorf("message does not name the header: %v", err)
	}

	tok := "s3cret-token"
	for _, v := range []string{"Bearer " + tok, "bearer " + tok} {
		if err := VerifyBearer(tok, v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	for v, reason := range map[string]error{
		"":                    ErrNoSignature,
		tok:                   ErrMalformedSignature,
		"Basic " + tok:        ErrMalformedSignature,
		"Bearer ":             ErrMalformedSignature,
		"Bearer s3cret":       ErrWrongSignature,
		"Bearer " + tok + "x": ErrWrongSignature,
	} {
		err := VerifyBearer(tok, v)
		wantVerify(t, err, reason, []byte(tok), nil)
	}
	wantVerify(t, VerifyBearer("", "Bearer x"), ErrWrongSignature, nil, nil)
}

// Proves B73 (docs/behaviours.md).
func FuzzVerify(f *testing.F) {
	body := []byte(`{"zen":"Keep it logically awesome."}`)
	f.Add(body, Sign(testSecret, body), "Bearer x")
	f.Add([]byte{}, "sha256=", "")
	f.Add([]byte("x"), "sha256="+strings.Repeat("f", 64), "Bearer")
	f.Add([]byte("x"), strings.Repeat("é", 40), "bearer   ")
	f.Fuzz(func(t *testing.T, body []byte, sig, auth string) {
		for _, err := range []error{
			VerifyGitHub(testSecret, body, sig),
			VerifyGitea(testSecret, body, http.Header{HeaderGiteaSignature: {sig}}),
			VerifyHMAC(testSecret, body, DefaultSignatureHeader, sig),
			VerifyBearer("tok", auth),
		} {
			if err == nil {
				continue
			}
			var ve *VerifyError
			if !errors.As(err, &ve) || kiln.ErrorCode(err) != kiln.CodeUnauthorized {
				t.Fatalf("not a verification error: %v", err)
			}
		}
		if err := VerifyGitHub(testSecret, body, Sign(testSecret, body)); err != nil {
			t.Fatalf("own signature rejected: %v", err)
		}
		if VerifyGitHub(testSecret, body, sig) == nil {
			got, _ := hex.DecodeString(strings.TrimSpace(strings.TrimPrefix(sig, "sha256=")))
			want, _ := hex.DecodeString(Sign(testSecret, body)[len("sha256="):])
			if !hmac.Equal(got, want) {
				t.Fatalf("accepted a foreign signature %q", sig)
			}
		}
	})
}
