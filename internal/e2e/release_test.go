package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// B249: scripts/release builds a static binary whose `kiln version` names
// the module version and the git revision it was built from (never "dev"),
// and a SHA256SUMS that verifies.
func TestReleaseBinaryKnowsItsVersion(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("sha256sum is not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout: there is no revision to stamp")
	}
	out := t.TempDir()
	target := "linux/" + runtime.GOARCH
	cmd := exec.Command(filepath.Join(root, "scripts/release"), out)
	cmd.Env = append(os.Environ(), "KILN_RELEASE_TARGETS="+target)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release: %v\n%s", err, b)
	}
	bin := filepath.Join(out, "kiln-linux-"+runtime.GOARCH)
	b, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("kiln version: %v\n%s", err, b)
	}
	version := string(b)
	// v0.0.0-20261201194900-446c63cabcde (a pseudo-version) or a tag, then the revision.
	if !regexp.MustCompile(`^kiln v\d+\.\d+\.\d+\S*\n`).MatchString(version) ||
		!regexp.MustCompile(`\n  revision [0-9a-f]{40}`).MatchString(version) || strings.Contains(version, "dev") {
		t.Errorf("kiln version:\n%s", version)
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = out
	if b, err := check.CombinedOutput(); err != nil || !strings.Contains(string(b), "kiln-linux-"+runtime.GOARCH+": OK") {
		t.Errorf("sha256sum -c: %v\n%s", err, b)
	}
	if b, err := exec.Command("file", bin).CombinedOutput(); err == nil && !strings.Contains(string(b), "statically linked") {
		t.Errorf("not static: %s", b)
	}
}
