package datapath

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

func TestCompileWiresJumps(t *testing.T) {
	// (a or b) and not c: a, b and c once each, evaluated as C's && and ||
	p, err := Compile("(type(data) or type(data-ack)) and not src(10.0.0.0/8)", "count drop", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.FirstActor != 3 || len(p.Steps) != 5 {
		t.Fatalf("first actor %d, %d steps", p.FirstActor, len(p.Steps))
	}
	want := []struct {
		prog        string
		match, miss uint8
	}{
		{"sel_type", 2, 1},          // data: on to c; else try data-ack
		{"sel_type", 2, stepNone},   // data-ack: on to c; else not selected
		{"sel_prefix", stepNone, 3}, // not c: a match is not selected, a miss goes to the actors
	}
	for i, w := range want {
		s := p.Steps[i]
		if s.Prog != w.prog || s.OnMatch != w.match || s.OnMiss != w.miss || s.Flags != 0 {
			t.Errorf("step %d: %+v, want %+v", i, s, w)
		}
	}
	if p.Steps[3].Prog != "act_count" || p.Steps[4].Prog != "act_drop" {
		t.Errorf("actors %s, %s", p.Steps[3].Prog, p.Steps[4].Prog)
	}
	// No selector: every packet goes straight to the actors.
	p, err = Compile("", "set_backup", nil)
	if err != nil || p.FirstActor != 0 || p.Steps[0].Args[0] != 1 {
		t.Fatalf("%+v, %v", p, err)
	}
}

// exprTree is a random selector expression whose leaves are numbered in
// the order they are written (leaf i is seq(i, i+1), step i).
type exprTree struct {
	op   string // and, or, not, leaf
	kids []*exprTree
	leaf int
}

func randomTree(rng *rand.Rand, leaves *int, depth int) *exprTree {
	if depth == 0 || rng.IntN(4) == 0 {
		*leaves++
		return &exprTree{op: "leaf", leaf: *leaves - 1}
	}
	switch rng.IntN(3) {
	case 0:
		return &exprTree{op: "not", kids: []*exprTree{randomTree(rng, leaves, depth-1)}}
	case 1:
		return &exprTree{op: "and", kids: []*exprTree{randomTree(rng, leaves, depth-1), randomTree(rng, leaves, depth-1)}}
	}
	return &exprTree{op: "or", kids: []*exprTree{randomTree(rng, leaves, depth-1), randomTree(rng, leaves, depth-1)}}
}

func (e *exprTree) String() string {
	switch e.op {
	case "leaf":
		return fmt.Sprintf("seq(%d, %d)", e.leaf, e.leaf+1)
	case "not":
		return "not (" + e.kids[0].String() + ")"
	}
	return "(" + e.kids[0].String() + ") " + e.op + " (" + e.kids[1].String() + ")"
}

func (e *exprTree) eval(v []bool) bool {
	switch e.op {
	case "leaf":
		return v[e.leaf]
	case "not":
		return !e.kids[0].eval(v)
	case "and":
		return e.kids[0].eval(v) && e.kids[1].eval(v)
	}
	return e.kids[0].eval(v) || e.kids[1].eval(v)
}

// selected follows the compiled program's jumps as the chain's BPF
// program does, step i matching when v[i]; jumps must go forward.
func selected(t *testing.T, p *Program, v []bool) bool {
	cur := 0
	for cur < p.FirstActor {
		s := p.Steps[cur]
		m := v[cur] != (s.Flags&stepNegate != 0)
		next := s.OnMiss
		if m {
			next = s.OnMatch
		}
		if next == stepNone {
			return false
		}
		if int(next) <= cur || int(next) > p.FirstActor {
			t.Fatalf("step %d jumps to %d (first actor %d)", cur, next, p.FirstActor)
		}
		cur = int(next)
	}
	return true
}

// Random and/or/not trees: one step per selector, and the compiled jumps
// select exactly when the expression is true, for every combination of
// selector results.
func TestCompiledJumpsAgreeWithTheExpression(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tried := 0
	for range 300 {
		n := 0
		tree := randomTree(rng, &n, 5)
		if n > 12 {
			continue
		}
		expr := tree.String()
		p, err := Compile(expr, "count", nil)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if p.FirstActor != n {
			t.Fatalf("%s: %d selector steps for %d selectors", expr, p.FirstActor, n)
		}
		tried++
		v := make([]bool, n)
		for bits := 0; bits < 1<<n; bits++ {
			for i := range v {
				v[i] = bits&(1<<i) != 0
			}
			if got, want := selected(t, p, v), tree.eval(v); got != want {
				t.Fatalf("%s with selector results %v: selected %v, the expression says %v", expr, v, got, want)
			}
		}
	}
	if tried < 100 {
		t.Fatalf("only %d expressions tried", tried)
	}
}

// An expression whose disjunctive normal form explodes (20 ANDed pairs of
// ORs: 2^20 groups) was expanded in full before its size was checked:
// 1.7 s and 1.4 GB here, more with every pair. It is refused while it is
// read now, and what it costs is bounded: the bytes allocated are counted
// (not the time, which depends on the machine). So are a few thousand
// nested parentheses, and an expression longer than 8192.
func TestCompileBoundsHostileExpressions(t *testing.T) {
	pairs := func(n int) string {
		return strings.TrimSuffix(strings.Repeat("(type(fin) or type(rst)) and ", n), " and ")
	}
	cases := []struct{ name, sel, act, want string }{
		{"2^20 DNF groups", pairs(20), "count", "more than 31 selectors: a chain has at most 32 steps"},
		{"nested parentheses", strings.Repeat("(", 4000) + "type(fin)" + strings.Repeat(")", 4000), "count", ""},
		{"deep nots", strings.Repeat("not ", 2000) + "type(fin)", "count", ""},
		{"too long", strings.Repeat(" ", MaxExprBytes) + "type(fin)", "count", "at most 8192 are read"},
		{"actors past the steps", pairs(15), strings.Repeat("count ", 1000), "the chain has more than 32 steps (30 selectors, more than 2 actors)"},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Compile(c.sel, c.act, nil)
		runtime.ReadMemStats(&after)
		if c.want == "" && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
		// A few hundred bytes per byte of expression at most (tokens,
		// nodes, the error's copy of the text): 10 MB is far above what
		// these take, and far below what a DNF of them took.
		alloc := after.TotalAlloc - before.TotalAlloc
		if alloc > 10<<20 {
			t.Errorf("%s: compiling allocated %d MB", c.name, alloc>>20)
		}
		t.Logf("%s: %d KB allocated", c.name, alloc>>10)
	}
	// The 15 pairs that expanded to 2^15 groups are 30 selectors: a chain.
	p, err := Compile(pairs(15), "count", nil)
	if err != nil || p.FirstActor != 30 || len(p.Steps) != 31 {
		t.Fatalf("15 ANDed pairs: %v", err)
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
