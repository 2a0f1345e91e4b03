package scenario_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mpsteer/internal/lab/scenario"
)

func TestShippedScenariosParse(t *testing.T) {
	files, _ := filepath.Glob("../../../scenarios/*.yaml")
	if len(files) == 0 {
		t.Fatal("no shipped scenarios found")
	}
	for _, f := range files {
		if _, err := scenario.Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestBadDaemonConfigInAVariantIsRefused(t *testing.T) {
	src := `paths: [{name: wifi}, {name: cell}]
traffic: [{type: bulk, duration: 5s}]
variants:
  - mptcp
  - name: mptcp+prefer
    daemon:
      client:
        policies: [{name: prefer, k: 0}]
`
	f := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := scenario.Load(f)
	want := f + `:8: variants[1].daemon.client.policies[0].k: "0" is not valid`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant it to contain %q", err, want)
	}
}
