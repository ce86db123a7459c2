package localrun

import "github.com/kilnci/kiln/internal/expr"

func renderWith(src string, ctx map[string]any) (string, error) {
	t, err := expr.ParseTemplate(src)
	if err != nil {
		return "", err
	}
	return t.Render(&expr.Env{Contexts: ctx})
}
