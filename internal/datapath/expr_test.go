package datapath

import (
	"strings"
	"testing"
)

func TestCompileWiresGroups(t *testing.T) {
	// (a or b) and not c  →  a∧¬c ∨ b∧¬c
	p, err := Compile("(type(data) or type(data-ack)) and not src(10.0.0.0/8)", "count drop", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.FirstActor != 4 || len(p.Steps) != 6 {
		t.Fatalf("first actor %d, %d steps", p.FirstActor, len(p.Steps))
	}
	want := []struct {
		prog        string
		match, miss uint8
		negated     bool
	}{
		{"sel_type", 1, 2, false}, {"sel_prefix", 4, 2, true},
		{"sel_type", 3, stepNone, false}, {"sel_prefix", 4, stepNone, true},
	}
	for i, w := range want {
		s := p.Steps[i]
		if s.Prog != w.prog || s.OnMatch != w.match || s.OnMiss != w.miss || (s.Flags&stepNegate != 0) != w.negated {
			t.Errorf("step %d: %+v, want %+v", i, s, w)
		}
	}
	if p.Steps[4].Prog != "act_count" || p.Steps[5].Prog != "act_drop" {
		t.Errorf("actors %s, %s", p.Steps[4].Prog, p.Steps[5].Prog)
	}
	// No selector: every packet goes straight to the actors.
	p, err = Compile("", "set_backup", nil)
	if err != nil || p.FirstActor != 0 || p.Steps[0].Args[0] != 1 {
		t.Fatalf("%+v, %v", p, err)
	}
}

func TestCompileErrorsSayWhereAndWhat(t *testing.T) {
	cases := []struct{ sel, act, want string }{
		{"type(data", "count", `--select "type(data", at column 10: expected , or ) after the argument "data"`},
		{"type(dta)", "count", `"dta" is not a packet type (valid: add-addr,`},
		{"sorce(10.0.0.0/8)", "count", `unknown selector "sorce" (valid: tuple, pair, src, dst, seq, dseq, type)`},
		{"src(10.0.0.300/8)", "count", `"10.0.0.300/8" is not a prefix or address`},
		{"tuple(src=10.0.0.1:99999)", "count", `is not an address or address:port`},
		{"pair(10.0.0.1)", "count", "pair needs both addresses"},
		{"tuple(src=10.0.0.1, dst=fd00::1)", "count", "mixes IPv4 and IPv6"},
		{"type(data) and", "count", "the expression ends where a selector was expected"},
		{"type(data) type(fin)", "count", `unexpected "type"`},
		{"", "", "a chain needs at least one actor"},
		{"", "setbackup", `unknown actor "setbackup" (valid: set_backup, clear_backup, strip_add_addr, clamp_rwnd, drop, mark, count)`},
		{"", "clamp_rwnd(10)", `clamp_rwnd: "10" is neither a rate (10mbit, 1MB/s) nor a window size (64KiB)`},
		{"", "clamp_rwnd(10mbps)", `is neither a rate`},
		{"", "mark(classid=1-10)", `classid: "1-10" is not MAJOR:MINOR`},
		{"", "drop(now)", "drop takes no arguments"},
		{"", "count and drop", "actors are a list"},
		{"seq(1, x)", "count", `"x" is not a sequence number`},
		{strings.Repeat("type(fin) and ", 32) + "type(rst)", "count", "a chain has at most 32 steps"},
	}
	for _, c := range cases {
		_, err := Compile(c.sel, c.act, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("select %q act %q:\n err %v\nwant %q", c.sel, c.act, err, c.want)
		}
	}
}

func TestCompileArguments(t *testing.T) {
	p, err := Compile("tuple(src=10.1.0.1:5000, dst=[fd00::2]:80)", "count", nil)
	if err == nil {
		t.Fatalf("mixed families accepted: %+v", p)
	}
	p, err = Compile("tuple(src=[fd00::1]:5000, dst=[fd00::2]:80)", "clamp_rwnd(10mbit) mark(0x10)", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Steps[0].Args
	if s[0] != 1 || s[1] != 1 || s[2] != 1 || s[4] != 0x13 || s[5] != 0x88 || s[8] != 0xfd || s[24+15] != 2 {
		t.Fatalf("tuple args %x", s[:40])
	}
	if rate := uint64(p.Steps[1].Args[0]) | uint64(p.Steps[1].Args[1])<<8 | uint64(p.Steps[1].Args[2])<<16; rate != 1250000 {
		t.Fatalf("clamp rate %d B/s, want 1250000", rate)
	}
}
