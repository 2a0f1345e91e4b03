package apiserver

import (
	"bytes"
	"net/http/httptest"
	"os"
	"testing"

	"mpsteer/internal/api"
	"mpsteer/internal/testutil"
)

// TestMain: the fuzz target here runs without minimization by default
// (testutil.FuzzMain says why; this one went 12 s without a reported input
// while a worker minimized).
func TestMain(m *testing.M) { os.Exit(testutil.FuzzMain(m)) }

// The API's request decoder takes what any local root client sends.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"file": "/etc/mpsteer.yaml", "config": "policies: []"}`))
	f.Add([]byte(`{"targets": ["wlan0"], "clear": false}`))
	f.Add([]byte(`{"targets": [1, 2]}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a api.ApplyRequest
		decode(httptest.NewRequest("POST", "/v1/policies", bytes.NewReader(b)), &a)
		var p api.PreferRequest
		decode(httptest.NewRequest("POST", "/v1/prefer", bytes.NewReader(b)), &p)
	})
}
