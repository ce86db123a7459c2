package ingress

import (
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
)

// B245: a dispatch names its workflow by path, file name or file name
// without the extension, and a generic webhook's dispatch, which gives the
// path, selects the same workflow as the CLI's, which gives the file name.
func TestDispatchNamesAWorkflowByPathOrBaseName(t *testing.T) {
	const deploy = "on: {dispatch: {}}\njobs:\n  ship:\n    steps: [{run: ./ship}]\n"
	files := []forge.WorkflowFile{
		{Path: ".kiln/workflows/ci.yml", Content: []byte("on: {push: {}}\njobs:\n  b:\n    steps: [{run: make}]\n")},
		{Path: ".kiln/workflows/deploy.yml", Content: []byte(deploy)},
	}
	src := &forge.Source{Name: "hook", Kind: kiln.SourceGeneric, Generic: &forge.GenericConfig{
		Repository: "acme/app", CloneURL: "https://git.example.com/acme/app.git", DefaultBranch: "main",
	}}
	tr, err := forge.GenericEvent(src, &forge.Delivery{Source: "hook", Kind: kiln.SourceGeneric, Event: "dispatch", Body: []byte(`{"workflow":"deploy.yml"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{tr.Workflow, "deploy.yml", "deploy", ".kiln/workflows/deploy.yml"} {
		wfs, _, problems := (&parseCache{}).parseAll(files, name)
		if len(wfs) != 1 || wfs[0].File != ".kiln/workflows/deploy.yml" || len(problems) > 0 {
			t.Errorf("dispatch of %q selects %d workflows (%v)", name, len(wfs), problems)
		}
	}
	for _, name := range []string{"deploy.yaml", "ship", "workflows/deploy.yml", "eploy.yml"} {
		if wfs, _, _ := (&parseCache{}).parseAll(files, name); len(wfs) != 0 {
			t.Errorf("dispatch of %q selects %s", name, wfs[0].File)
		}
	}
}
