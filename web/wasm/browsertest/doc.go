//go:build !js

// Package browsertest drives the dashboard in a real, headless Chromium
// through github.com/chromedp/chromedp, for the browser tests: this
// package's own, against a scripted API server, and the e2e suite's,
// against the running containers.
//
// Chromium is Debian's /usr/bin/chromium (scripts/ensure-chromium.sh
// installs it; CHROMIUM_PATH overrides the path). Under -short the tests
// that need it are skipped.
package browsertest
