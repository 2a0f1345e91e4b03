package datapath

import (
	"sync"
	"testing"
	"time"
)

// Building and verifying a chain's program takes milliseconds, tens for a
// long chain: List and Status must not wait for it. The daemon's metrics
// read them while holding the daemon's own lock. The test holds a chain's
// build open (the manager's load hook blocks) and lists meanwhile.
func TestListAndStatusDoNotWaitForABuild(t *testing.T) {
	m := newTestManager(t)
	id, _, err := m.AddDetached("", "count")
	if err != nil {
		t.Fatal(err)
	}
	building := make(chan struct{})
	finish := make(chan struct{})
	var once sync.Once
	m.loadHook = func() {
		once.Do(func() { close(building) })
		<-finish
	}
	added := make(chan error, 1)
	go func() { _, _, err := m.AddDetached("type(data)", "count"); added <- err }()
	<-building
	listed := make(chan []*ChainStatus, 1)
	go func() {
		l := m.List()
		if _, err := m.Status(id); err != nil {
			t.Error(err)
		}
		listed <- l
	}()
	select {
	case l := <-listed:
		if len(l) != 1 || l[0].ID != id {
			t.Errorf("while chain 2 builds, List shows %d chains, want chain %d alone", len(l), id)
		}
	case <-time.After(10 * time.Second): // a failure's bound, not a wait for a state
		t.Error("List and Status waited for a chain's build")
		close(finish)
		<-listed
		<-added
		return
	}
	close(finish)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	if l := m.List(); len(l) != 2 {
		t.Fatalf("after the build, %d chains, want 2", len(l))
	}
}
