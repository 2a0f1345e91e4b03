package testutil

import (
	"testing"

	"mpsteer/internal/kernelfeat"
)

// RequireFeature skips the test when the running kernel lacks a feature
// (and has no fallback for it), naming the feature and the Linux version
// that introduced it. Unlike Unavailable this is a skip even under
// RequireEnv: an older kernel is not a broken setup. Not root is one,
// though: the probes need it, so root is required first.
func RequireFeature(t testing.TB, f kernelfeat.Name) {
	t.Helper()
	RequireRoot(t, "probing the kernel's features")
	r := kernelfeat.Probe()
	if r.Has(f) {
		return
	}
	got := r.Get(f)
	t.Skipf("kernel lacks %s: this kernel (%s) lacks %s, which arrived in Linux %s (%s)", f, r.Kernel, f, got.Since, got.Reason)
}
