package forge

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/kilnci/kiln"
)

// Checks on the names, URLs and ids that reach URL paths, git arguments
// and shell scripts. Everything a source, a payload or an API caller
// supplies passes one of these first.

// checkBaseURL accepts an absolute http(s) URL with a host, no query, no
// fragment and no credentials. Empty is fine when optional.
func checkBaseURL(field, raw string, optional bool) error {
	if raw == "" && optional {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return kiln.Errorf(kiln.CodeInvalid, "%s %q is not an http(s) URL like https://host/path", field, raw)
	}
	if u.User != nil {
		return kiln.Errorf(kiln.CodeInvalid, "%s must not contain credentials; put the token in the token field", field)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return kiln.Errorf(kiln.CodeInvalid, "%s %q must not have a query or fragment", field, raw)
	}
	return nil
}

func checkCloneURL(raw string) error {
	if strings.HasPrefix(raw, "-") {
		return kiln.Errorf(kiln.CodeInvalid, "clone_url %q is not a URL", raw)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return kiln.Errorf(kiln.CodeInvalid, "clone_url %q is not a URL like https://host/owner/repo.git", raw)
	}
	switch u.Scheme {
	case "https", "http", "ssh", "git":
		if u.Host == "" {
			return kiln.Errorf(kiln.CodeInvalid, "clone_url %q has no host", raw)
		}
	case "file":
		if (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) {
			return kiln.Errorf(kiln.CodeInvalid, "clone_url %q must name an absolute path", raw)
		}
	default:
		return kiln.Errorf(kiln.CodeInvalid, "clone_url scheme %q is not https, http, ssh, git or file", u.Scheme)
	}
	if _, ok := u.User.Password(); ok {
		return kiln.Errorf(kiln.CodeInvalid, "clone_url must not contain a password; use clone_username and clone_password")
	}
	return nil
}

var headerNameRE = lazyRegexp("^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")

func validHeaderName(h string) bool { return headerNameRE().MatchString(h) }

// parseRSAKey reads a GitHub App private key: PKCS#1 (what GitHub hands
// out) or PKCS#8.
func parseRSAKey(pemText string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(pemText))
	if block == nil {
		return nil, kiln.Errorf(kiln.CodeInvalid, "the GitHub App private key is not a PEM block; paste the whole .pem file GitHub generated")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, kiln.Errorf(kiln.CodeInvalid, "the GitHub App private key could not be read as an RSA key")
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, kiln.Errorf(kiln.CodeInvalid, "the GitHub App private key is not an RSA key")
	}
	return rk, nil
}

// Repository names are owner/name, each part what GitHub and Gitea allow.
var repoPartRE = lazyRegexp(`^[A-Za-z0-9_.-]{1,100}$`)

// splitRepo checks an owner/name repository and returns its two parts.
func splitRepo(repo string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || !repoPartRE().MatchString(owner) || !repoPartRE().MatchString(name) ||
		owner == "." || owner == ".." || name == "." || name == ".." {
		return "", "", kiln.Errorf(kiln.CodeInvalid, "repository %q is not of the form owner/name", repo)
	}
	return owner, name, nil
}

var shaRE = lazyRegexp(`^[0-9a-f]{7,64}$`)

// checkSHA accepts a (possibly abbreviated) lower-case hex commit id. Every
// SHA reaches a URL path or a git argument, so nothing else gets through.
func checkSHA(sha string) error {
	if !shaRE().MatchString(sha) {
		return kiln.Errorf(kiln.CodeInvalid, "commit %q is not a hexadecimal commit id", sha)
	}
	return nil
}

// zeroSHA reports whether sha is git's all-zeros "no commit" id (or empty).
func zeroSHA(sha string) bool {
	return strings.Trim(sha, "0") == ""
}

// validRefName is a conservative subset of git check-ref-format: enough to
// keep refs out of option parsing and URL trickery.
func validRefName(ref string) bool {
	if ref == "" || len(ref) > 255 || strings.HasPrefix(ref, "-") || strings.HasPrefix(ref, "/") ||
		strings.HasSuffix(ref, "/") || strings.HasSuffix(ref, ".") || strings.HasSuffix(ref, ".lock") ||
		strings.Contains(ref, "..") || strings.Contains(ref, "//") || strings.Contains(ref, "@{") {
		return false
	}
	for _, r := range ref {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return false
		}
	}
	return true
}

func itoa(n int) string { return strconv.Itoa(n) }

// lazyRegexp compiles expr on first use: the validators' bounded
// repetitions ({1,100}, {1,200}) compile to large programs, and every kiln
// process (a CLI command, an agent) paid ~2 ms for them at start, most
// never to use them.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
