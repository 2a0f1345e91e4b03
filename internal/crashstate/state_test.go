package crashstate

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mpsteer/internal/pm"
)

func TestRoundTripKeepsWhatWasSetAndOwned(t *testing.T) {
	p := filepath.Join(t.TempDir(), "daemon-netns-7.json")
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	s.SetFlags(a, pm.FlagSubflow, pm.FlagSubflow|pm.FlagBackup)
	s.SetFlags(a, pm.FlagSubflow|pm.FlagBackup, pm.FlagSubflow) // the original stays the first one
	s.Own(b, 9)
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	r, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if ch, ok := r.Changed(a); !ok || ch.Original != pm.FlagSubflow || ch.Set != pm.FlagSubflow {
		t.Fatalf("changed %v %+v", ok, ch)
	}
	if id, ok := r.Owned(b); !ok || id != 9 {
		t.Fatalf("owned %v %d", ok, id)
	}
	r.Forget(a)
	r.Forget(b)
	if err := r.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("an empty state leaves no file: %v", err)
	}
}

// A file that cannot be parsed is an error naming it, not an empty state
// taken silently (what a killed daemon changed would never be undone).
func TestCorruptFileIsAnErrorNamingIt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "daemon-netns-7.json")
	if err := os.WriteFile(p, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("err = %v, want one naming %s", err, p)
	}
	if s == nil || !s.Empty() {
		t.Fatal("Load must still return a usable, empty state")
	}
}

// A state that cannot be written is an error naming the file.
func TestSaveErrorNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "run")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil { // a file where the directory should be
		t.Fatal(err)
	}
	p := filepath.Join(blocker, "daemon-netns-7.json")
	s, err := Load(p)
	if err == nil {
		// Reading through a file as if it were a directory fails too
		// (ENOTDIR): reported, and the state starts empty.
		t.Log("load: no error")
	}
	s.Own(netip.MustParseAddr("10.0.0.1"), 3)
	if err := s.Save(); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("save err = %v, want one naming %s", err, p)
	}
}

// Files of older daemons kept the original flags only: the flags they
// set are taken to be the original's backup bit flipped.
func TestOlderFormatIsRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "daemon-netns-7.json")
	if err := os.WriteFile(p, []byte(`{"original_flags": {"10.0.0.1": 2}, "owned_endpoints": {"10.0.0.2": 4}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	ch, ok := s.Changed(netip.MustParseAddr("10.0.0.1"))
	if !ok || ch.Original != pm.FlagSubflow || ch.Set != pm.FlagSubflow|pm.FlagBackup {
		t.Fatalf("%v %+v", ok, ch)
	}
	if got := len(s.Addrs()); got != 2 {
		t.Fatalf("addrs %d", got)
	}
}

// An endpoint being re-added is kept as it is to be put back, until it is
// back.
func TestReopeningRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "daemon-netns-8.json")
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("10.2.0.1")
	e := pm.Endpoint{ID: 3, Addr: a, Flags: pm.FlagSubflow | pm.FlagBackup, IfIndex: 4}
	s.Reopening(a, e)
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	r, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := r.ReopeningOf(a); !ok || got != e || r.Empty() || len(r.Addrs()) != 1 {
		t.Fatalf("read back %+v (%v), addrs %v", got, ok, r.Addrs())
	}
	r.Reopened(a)
	if err := r.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("the file stays with nothing in it: %v", err)
	}
}
