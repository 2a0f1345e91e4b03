package policy

import (
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/observe"
)

// seen records what a policy was shown.
type seen struct {
	toks     []uint32
	outcomes []Outcome
}

func (p *seen) Name() string { return "seen" }
func (p *seen) Status() any  { return nil }
func (p *seen) Decide(s *Snapshot) []Action {
	p.toks = nil
	for _, c := range s.Conns {
		p.toks = append(p.toks, c.Token)
	}
	p.outcomes = s.Outcomes
	return nil
}

func TestCheckCgroup(t *testing.T) {
	for _, bad := range []string{"", "system.slice/foo.service", "/", "/a/../b", "/a/", "//a", "/a/./b"} {
		if CheckCgroup(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, good := range []string{"/system.slice/foo.service", "/user.slice/user-1000.slice", "/a"} {
		if err := CheckCgroup(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	if !InCgroup("/a/b/c", "/a/b") || !InCgroup("/a/b", "/a/b") || InCgroup("/a/bc", "/a/b") || InCgroup("", "/a") {
		t.Error("InCgroup")
	}
}

// A scoped policy sees the connections of its cgroup and of those below
// it, and the outcomes of its own actions on them under its own name.
func TestScopedSeesItsCgroupOnly(t *testing.T) {
	in := &seen{}
	s := NewScoped(in, "/app.slice/video.service")
	if s.Name() != "seen@/app.slice/video.service" {
		t.Fatalf("name %q", s.Name())
	}
	snap := &Snapshot{Now: time.Unix(1, 0), Conns: []*Conn{
		{Token: 1, Cgroup: "/app.slice/video.service"},
		{Token: 2, Cgroup: "/app.slice/video.service/worker"},
		{Token: 3, Cgroup: "/app.slice/video.service2"},
		{Token: 4, Cgroup: ""},
		{Token: 5, Cgroup: "/system.slice/backup.service"},
	}, Outcomes: []Outcome{
		{Action: Action{Kind: Create, Token: 1, Policy: s.Name()}, Result: Refused},
		{Action: Action{Kind: Create, Token: 1, Policy: "seen"}, Result: Refused}, // an unscoped one's
		{Action: Action{Kind: Create, Token: 3, Policy: s.Name()}, Result: Refused},
	}}
	s.Decide(snap)
	if len(in.toks) != 2 || in.toks[0] != 1 || in.toks[1] != 2 {
		t.Fatalf("saw connections %v, want [1 2]", in.toks)
	}
	if len(in.outcomes) != 1 || in.outcomes[0].Action.Policy != "seen" || in.outcomes[0].Action.Token != 1 {
		t.Fatalf("outcomes %+v", in.outcomes)
	}
	if st := s.Status().(ScopedStatus); st.Cgroup != "/app.slice/video.service" || len(st.Connections) != 2 {
		t.Fatalf("status %+v", st)
	}
}

// In the engine, a scoped policy decides for its connections and an
// unscoped one after it for the rest.
func TestScopedInTheEngine(t *testing.T) {
	wifi, cell := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1")
	srv := netip.MustParseAddrPort("10.9.0.2:80")
	conn := func(tok uint32, cg string, port uint16) *Conn {
		return &Conn{Token: tok, Cgroup: cg, Subflows: []observe.Subflow{
			{Token: tok, Local: netip.AddrPortFrom(wifi, port), Remote: srv, MPTCP: true, State: 1},
			{Token: tok, Local: netip.AddrPortFrom(cell, port), Remote: srv, MPTCP: true, State: 1},
		}}
	}
	e := &Engine{Policies: []Policy{
		NewScoped(NewStaticBackup(Env{}, []string{cell.String()}), "/backup.service"),
		NewStaticBackup(Env{}, []string{wifi.String()}),
	}}
	plan := e.Decide(&Snapshot{Now: time.Unix(1, 0), Conns: []*Conn{conn(1, "/backup.service", 1000), conn(2, "/video.service", 2000)}})
	want := map[SubflowID]string{
		NewSubflowID(netip.AddrPortFrom(cell, 1000), srv): "backup@/backup.service",
		NewSubflowID(netip.AddrPortFrom(wifi, 1000), srv): "backup",
		NewSubflowID(netip.AddrPortFrom(wifi, 2000), srv): "backup",
	}
	if len(plan.Backup) != len(want) {
		t.Fatalf("decisions %+v, want %v", plan.Backup, want)
	}
	for id, pol := range want {
		if a, ok := plan.Backup[id]; !ok || a.Policy != pol || !a.Backup {
			t.Errorf("%s: %+v, want backup by %s", id, a, pol)
		}
	}
	// Joins from the unscoped policy's address are backup on every
	// connection; the scoped one's only through its decisions (an
	// endpoint's flag would reach every connection).
	if got := e.Requirements().BackupAddrs; len(got) != 1 || got[wifi] != "backup" {
		t.Errorf("backup addresses %v, want %v by backup (the unscoped policy's only)", got, wifi)
	}
}
