package web_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/kilnci/kiln/internal/web/webtest"
)

// One headless chromium serves every browser test of the binary (each
// test opens its own tab; webtest); tests skip, loudly, where there is
// none.

func tab(t testing.TB) context.Context { return webtest.Tab(t) }

func closeBrowser() { webtest.Close() }

// do runs browser actions, failing the test on error.
func do(t *testing.T, c context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	webtest.Do(t, c, actions...)
}

// eval evaluates JavaScript in the tab and returns its value.
func eval[T any](t *testing.T, c context.Context, js string) T {
	t.Helper()
	return webtest.Eval[T](t, c, js)
}

// waitJS polls a JavaScript condition in the tab until it is true.
func waitJS(t *testing.T, c context.Context, what, cond string) {
	t.Helper()
	webtest.WaitJS(t, c, what, cond)
}

// screenshot saves the page as name.png (webtest.ScreenshotDir).
func screenshot(t *testing.T, c context.Context, name string) {
	t.Helper()
	webtest.Screenshot(t, c, name)
}

// browserLogin logs the tab in through the login form.
func (d *dash) browserLogin(t *testing.T, c context.Context, secret string) {
	t.Helper()
	webtest.Login(t, c, d.URL, secret)
}
