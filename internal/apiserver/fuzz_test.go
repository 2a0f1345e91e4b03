package apiserver

import (
	"bytes"
	"net/http/httptest"
	"testing"

	"mpsteer/internal/api"
)

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
