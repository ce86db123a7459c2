package forge

import (
	"bytes"
	"path"
	"strings"
	"testing"
)

// Output git does not make — truncated, with a size that is not one or
// runs past the end, a record without its newline, a listing without a
// tab — gives an error or is skipped, never a panic, a negative size or
// bytes of the next record.
//
// B137.
func TestGitParsersRefuseBadOutput(t *testing.T) {
	const oid = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
	for _, bad := range []string{
		oid + " blob 5\nabc",           // truncated
		oid + " blob 3\nabcd\n",        // not ended where the size says
		oid + " blob -1\n\n",           // negative
		oid + " blob 99999999999999\n", // past the end
		oid + " missing\n",
		oid + " blob 3",          // no newline after the header
		oid + " blob x\nabc\n",   // not a number
		oid + " blob 3\nabc\nzz", // garbage after a good record
	} {
		if blobs, err := parseCatFileBatch([]byte(bad)); err == nil {
			t.Errorf("cat-file output %q was read as %v", bad, blobs)
		}
	}
	blobs, err := parseCatFileBatch([]byte(oid + " blob 3\nabc\n" + oid + "x blob 0\n\n"))
	if err != nil || string(blobs[oid]) != "abc" || len(blobs[oid+"x"]) != 0 {
		t.Fatalf("good cat-file output: %v %v", blobs, err)
	}

	entries, oids := parseLsTree([]byte("100644 blob " + oid + "      -7\t.kiln/workflows/neg.yml\x00" +
		"100644 blob " + oid + "    abc\t.kiln/workflows/nan.yml\x00" +
		"100644 blob " + oid + "     12 .kiln/workflows/notab.yml\x00" +
		"100644 blob " + oid + "     12\t\x00" +
		"100644 blob " + oid + "     12\t.kiln/workflows/ok.yml\x00" +
		"120000 blob " + oid + "     12\t.kiln/workflows/link.yml\x00"))
	if len(entries) != 2 || entries[0].Name != "ok.yml" || entries[0].Size != 12 || entries[0].Type != "file" ||
		entries[1].Type != "symlink" || oids[".kiln/workflows/ok.yml"] != oid {
		t.Fatalf("ls-tree entries %+v %v", entries, oids)
	}

	sha := "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
	rank := map[string]int{"refs/heads/main": 1, "refs/tags/main": 2}
	for out, want := range map[string]string{
		"":                            "",
		"not-a-sha\trefs/tags/main\n": "",
		sha + "\trefs/heads/main\nzz\trefs/tags/main": sha,
		sha + " refs/heads/main\n":                    "",
		sha + "\trefs/heads/other\n":                  "",
		sha + "\trefs/heads/main\r\n":                 "",
	} {
		if got := pickLsRemote([]byte(out), rank); got != want {
			t.Errorf("ls-remote %q: %q, want %q", out, got, want)
		}
	}
	if got := parseNameList([]byte("a\x00\x00b\x00")); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("name list %q", got)
	}
}

// `git cat-file --batch` output: any bytes give an error or blobs that are
// exactly the bytes their headers announce, taken from the output.
//
// B137.
func FuzzParseCatFileBatch(f *testing.F) {
	f.Add([]byte("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391 blob 3\nabc\n"))
	f.Add([]byte("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391 blob 5\nabc"))
	f.Add([]byte("x missing\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		blobs, err := parseCatFileBatch(out)
		if err != nil {
			return
		}
		total := 0
		for oid, b := range blobs {
			if !bytes.Contains(out, []byte(oid)) || !bytes.Contains(out, b) {
				t.Fatalf("blob %q (%q) is not from the output", oid, b)
			}
			total += len(b)
		}
		if total > len(out) {
			t.Fatalf("%d blob bytes from %d bytes of output", total, len(out))
		}
	})
}

// `git ls-tree -z -l` output: entries only for well-formed records, each
// with its path, its base name, a known type and a size that is not
// negative.
//
// B137.
func FuzzParseLsTree(f *testing.F) {
	f.Add([]byte("100644 blob e69de29bb2d1d6434b8b29ae775ad8c2e48c5391      12\t.kiln/workflows/ci.yml\x00"))
	f.Add([]byte("040000 tree e69de29bb2d1d6434b8b29ae775ad8c2e48c5391       -\t.kiln/workflows/sub\x00"))
	f.Add([]byte("120000 blob e69de29bb2d1d6434b8b29ae775ad8c2e48c5391      -3\tx\x00100644 blob y 1\t\x00"))
	f.Fuzz(func(t *testing.T, out []byte) {
		entries, oids := parseLsTree(out)
		for _, e := range entries {
			if e.Path == "" || e.Name != path.Base(e.Path) || e.Size < 0 {
				t.Fatalf("entry %+v", e)
			}
			switch e.Type {
			case "file", "symlink", "dir":
			default:
				t.Fatalf("entry type %q", e.Type)
			}
			if _, ok := oids[e.Path]; !ok {
				t.Fatalf("no object id for %q", e.Path)
			}
		}
	})
}

// `git ls-remote` output of a repository kiln does not control: the pick
// is "" or a commit id listed for a ranked ref.
//
// B137.
func FuzzPickLsRemote(f *testing.F) {
	f.Add([]byte("6113728f27ae82c7b1a177c8d03f9e96e0adf246\trefs/heads/main\n"), "main")
	f.Add([]byte("zz\trefs/tags/v1^{}\n6113728f27ae82c7b1a177c8d03f9e96e0adf246\trefs/tags/v1\n"), "v1")
	f.Fuzz(func(t *testing.T, out []byte, ref string) {
		rank := map[string]int{"refs/heads/" + ref: 1, "refs/tags/" + ref: 2, "refs/tags/" + ref + "^{}": 3}
		got := pickLsRemote(out, rank)
		if got == "" {
			return
		}
		if checkSHA(got) != nil || !strings.Contains(string(out), got+"\t") {
			t.Fatalf("picked %q", got)
		}
	})
}

// NUL-separated names (`git diff --name-only -z`): no empty name, none
// holding a NUL.
//
// B137.
func FuzzParseNameList(f *testing.F) {
	f.Add([]byte("a.go\x00dir/b.go\x00"))
	f.Fuzz(func(t *testing.T, out []byte) {
		for _, n := range parseNameList(out) {
			if n == "" || strings.Contains(n, "\x00") {
				t.Fatalf("name %q", n)
			}
		}
	})
}
