// Package labtest builds lab worlds for tests: a scenario's variant given
// as YAML text, with the real emulator, removed when the test ends. (Apart
// from internal/testutil, whose helpers the datapath's own tests use: the
// lab's scenarios check daemon configs, which import the datapath.)
package labtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/testutil"
)

var labSeq atomic.Int32

// World builds the world of one variant of a scenario given as YAML
// text, with the real emulator, and removes it when the test ends.
func World(t testing.TB, src, variant string) *world.World {
	t.Helper()
	testutil.RequireLab(t)
	s, err := scenario.Parse(filepath.Join(t.TempDir(), "s.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("t%d-%d-%d", os.Getpid()%100000, labSeq.Add(1), time.Now().UnixNano()%1000)
	plan, err := world.NewPlan(name, s, s.Variant(variant))
	if err != nil {
		t.Fatal(err)
	}
	w, err := world.Up(context.Background(), plan, world.Options{Binary: testutil.Binary(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Down() })
	return w
}
