// Package webtest drives the dashboard in a real browser for tests: one
// headless chromium per test binary (Debian's, or KILN_CHROMIUM), a tab
// per test, and the screenshots tests save of the pages they see. The web
// package's tests and the end-to-end tests share it.
package webtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kilnci/kiln/internal/waittest"
)

var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

// ChromiumPath is the browser the tests start: KILN_CHROMIUM, else the
// first of Debian's and other usual places that exists, else "".
func ChromiumPath() string {
	if p := os.Getenv("KILN_CHROMIUM"); p != "" {
		return p
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, _ := exec.LookPath("chromium")
	return p
}

// Tab opens a browser tab for t, bounded to 90 seconds. Without a browser
// the test is skipped, loudly.
func Tab(t testing.TB) context.Context {
	t.Helper()
	browser.once.Do(func() {
		path := ChromiumPath()
		if path == "" {
			browser.err = fmt.Errorf("no chromium (apt-get install chromium, or set KILN_CHROMIUM)")
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
			chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		if err := chromedp.Do(bctx); err != nil {
			browser.err = fmt.Errorf("start chromium: %w", err)
			bcancel()
			acancel()
			return
		}
		browser.ctx, browser.cancel = bctx, func() { bcancel(); acancel() }
	})
	if browser.err != nil {
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING browser test %s: %v ***\n\n", t.Name(), browser.err)
		t.Skipf("SKIPPED (no browser): %v", browser.err)
	}
	tctx, cancel := context.WithTimeout(browser.ctx, 90*time.Second)
	tctx, cancel2 := chromedp.NewContext(tctx)
	t.Cleanup(func() { cancel2(); cancel() })
	return tctx
}

// Close stops the browser (TestMain calls it after the tests).
func Close() {
	if browser.cancel != nil {
		browser.cancel()
	}
}

// Do runs browser actions, failing the test on error.
func Do(t testing.TB, c context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(c, actions...); err != nil {
		t.Fatal(err)
	}
}

// Eval evaluates JavaScript in the tab and returns its value.
func Eval[T any](t testing.TB, c context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// WaitJS polls a JavaScript condition in the tab until it is true (30 s).
func WaitJS(t testing.TB, c context.Context, what, cond string) {
	t.Helper()
	waittest.Until(t, 30*time.Second, what, func() bool {
		ok, err := chromedp.Run(c, chromedp.Evaluate[bool](cond))
		if err != nil && c.Err() != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return err == nil && ok
	})
}

// ScreenshotDir is where Screenshot saves: KILN_SCREENSHOT_DIR, else
// kiln-screenshots in the system's temporary directory, so every run of
// the tests leaves the pages it saw for a person to look at.
func ScreenshotDir() string {
	if dir := os.Getenv("KILN_SCREENSHOT_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(os.TempDir(), "kiln-screenshots")
}

// Screenshot saves the whole page as name.png in ScreenshotDir.
func Screenshot(t testing.TB, c context.Context, name string) {
	t.Helper()
	dir := ScreenshotDir()
	// A page that is reloading (a live page at its run's end) has no
	// document to take: wait for one that has loaded.
	var png []byte
	waittest.UntilState(t, 30*time.Second, "a loaded page to screenshot", func() (bool, string) {
		ready, err := chromedp.Run(c, chromedp.Evaluate[string](`document.readyState`))
		if err != nil || ready != "complete" {
			return false, fmt.Sprint(ready, err)
		}
		png, err = chromedp.Run(c, chromedp.FullScreenshot(100))
		return err == nil, fmt.Sprint(err)
	})
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// Login logs the tab in through the dashboard's login form at base.
func Login(t testing.TB, c context.Context, base, secret string) {
	t.Helper()
	Do(t, c,
		chromedp.Navigate(base+"/runs"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), secret),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/queue"]`)),
	)
}
