package api_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api/apitest"
)

// B242: a local source whose path is not a git repository on the server's
// host is refused when it is added or changed, and nothing is stored.
func TestLocalSourcePathMustExistOnTheServer(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		dir := t.TempDir()
		file := filepath.Join(dir, "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]string{
			filepath.Join(dir, "missing"): "does not exist on the server's host",
			file:                          "is a file, not a git repository",
			dir:                           "is not a git repository",
		} {
			wantError(t, h, 400, kiln.CodeInvalid, "POST", "/api/v1/sources",
				`{"name":"x","kind":"local","local":{"path":"`+path+`"}}`, "source x: path "+path, want)
		}
		wantError(t, h, 400, kiln.CodeInvalid, "PATCH", "/api/v1/sources/"+apitest.SourceName,
			`{"local":{"path":"`+filepath.Join(dir, "missing")+`"}}`, "does not exist on the server's host")
		list, err := h.Client.Sources(ctx)
		if err != nil || len(list) != 1 || list[0].Local.Path != h.Repo {
			t.Fatalf("sources after the refusals: %+v, %v", list, err)
		}
	})
}
