package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"mpsteer/internal/units"
)

// MaxSteps is the most selectors and actors one chain may have (the
// chain's program is built for this many; loaded actors also count against
// the kernel's 33 tail calls per packet, see Manager).
const MaxSteps = 32

const (
	stepNone   = 0xff
	stepNegate = 0x1
	argsLen    = 48
)

// Packet type names and bits (mirrors T_* in mpsteer_chain.h).
var packetTypes = map[string]uint32{
	"mpc-syn": 1 << 0, "join-syn": 1 << 1, "join-synack": 1 << 2, "join-ack": 1 << 3,
	"data": 1 << 4, "data-ack": 1 << 5, "add-addr": 1 << 6, "remove-addr": 1 << 7,
	"mp-prio": 1 << 8, "mp-fail": 1 << 9, "fastclose": 1 << 10, "fin": 1 << 11, "rst": 1 << 12,
	"mptcp": 1 << 13,
}

// Step is one compiled step of a chain.
type Step struct {
	Prog    string // program name in the step array
	Args    [argsLen]byte
	OnMatch uint8
	OnMiss  uint8
	Flags   uint8
	Text    string // how the user wrote it
}

// Program is a chain ready to be written into a descriptor.
type Program struct {
	Steps      []Step
	FirstActor int
}

// ExprError is a problem in a selector or actor expression, with where.
type ExprError struct {
	What string // "select" or "act"
	Text string
	Col  int
	Msg  string
}

func (e *ExprError) Error() string {
	return fmt.Sprintf("--%s %q, at column %d: %s", e.What, e.Text, e.Col+1, e.Msg)
}

// ---- lexing ---------------------------------------------------------------

type token struct {
	kind string // word, (, ), ",", eof
	text string
	col  int
}

func lex(what, s string) ([]token, error) {
	var out []token
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '(' || c == ')' || c == ',':
			out = append(out, token{string(c), string(c), i})
			i++
		case c == '&' && i+1 < len(s) && s[i+1] == '&':
			out = append(out, token{"word", "and", i})
			i += 2
		case c == '|' && i+1 < len(s) && s[i+1] == '|':
			out = append(out, token{"word", "or", i})
			i += 2
		case c == '!':
			out = append(out, token{"word", "not", i})
			i++
		default:
			j := i
			depth := 0 // allow brackets inside a word ([fd00::1]:80)
			for j < len(s) {
				d := s[j]
				if d == '[' {
					depth++
				} else if d == ']' {
					depth--
				} else if depth == 0 && (d == ' ' || d == '\t' || d == '(' || d == ')' || d == ',' || d == '!') {
					break
				} else if depth == 0 && (d == '&' || d == '|') && j+1 < len(s) && s[j+1] == d {
					break
				}
				j++
			}
			if j == i {
				return nil, &ExprError{what, s, i, fmt.Sprintf("unexpected %q", c)}
			}
			out = append(out, token{"word", s[i:j], i})
			i = j
		}
	}
	out = append(out, token{"eof", "", len(s)})
	return out, nil
}

// ---- selector expressions --------------------------------------------------

type node struct {
	op   string // and, or, not, sel
	kids []*node
	name string
	args []arg
	col  int
	text string
}

type arg struct {
	key, val string
	col      int
}

type parser struct {
	what, src string
	toks      []token
	i         int
	// maxCalls bounds the selectors (or actors) read: past it the
	// expression is refused where it stands, without reading the rest.
	maxCalls, calls int
	limitMsg        string // what the limit is, for its error
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) errf(col int, f string, a ...any) error {
	return &ExprError{p.what, p.src, col, fmt.Sprintf(f, a...)}
}

func (p *parser) parseOr() (*node, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == "word" && p.peek().text == "or" {
		p.next()
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &node{op: "or", kids: []*node{l, r}}
	}
	return l, nil
}

func (p *parser) parseAnd() (*node, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.peek().kind == "word" && p.peek().text == "and" {
		p.next()
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &node{op: "and", kids: []*node{l, r}}
	}
	return l, nil
}

func (p *parser) parseNot() (*node, error) {
	t := p.peek()
	if t.kind == "word" && t.text == "not" {
		p.next()
		k, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &node{op: "not", kids: []*node{k}}, nil
	}
	if t.kind == "(" {
		p.next()
		n, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if p.peek().kind != ")" {
			return nil, p.errf(p.peek().col, "expected ) to close the ( at column %d", t.col+1)
		}
		p.next()
		return n, nil
	}
	return p.parseCall()
}

// parseCall reads NAME or NAME(arg, key=value, …).
func (p *parser) parseCall() (*node, error) {
	t := p.next()
	if t.kind != "word" || t.text == "and" || t.text == "or" {
		if t.kind == "eof" {
			return nil, p.errf(t.col, "the expression ends where a %s was expected", map[string]string{"select": "selector", "act": "actor"}[p.what])
		}
		return nil, p.errf(t.col, "unexpected %q", t.text)
	}
	if p.calls++; p.calls > p.maxCalls {
		return nil, p.errf(t.col, "%s", p.limitMsg)
	}
	n := &node{op: "sel", name: t.text, col: t.col}
	if p.peek().kind == "(" {
		p.next()
		for p.peek().kind != ")" {
			a := p.next()
			if a.kind != "word" {
				return nil, p.errf(a.col, "expected an argument, found %q", a.text)
			}
			k, v, ok := strings.Cut(a.text, "=")
			if !ok {
				k, v = "", a.text
			}
			n.args = append(n.args, arg{k, v, a.col})
			switch p.peek().kind {
			case ",":
				p.next()
			case ")":
			default:
				return nil, p.errf(p.peek().col, "expected , or ) after the argument %q", a.text)
			}
		}
		p.next()
	}
	end := len(p.src)
	if p.i < len(p.toks) {
		end = p.toks[p.i].col
	}
	n.text = strings.TrimSpace(p.src[t.col:end])
	return n, nil
}

// wire lays the selectors of the tree out in the order they are written,
// one step each, and sets where each goes on a match and on a miss, as
// && and || are evaluated in C: the left side of an AND goes on to its
// right side on a match and to the AND's miss on a miss; an OR the other
// way round; NOT swaps the two. Every jump is forward (to a selector
// written further right, to the first actor, or to STEP_NONE: not
// selected), which the chain's program requires, and no selector is
// written twice: the steps are as many as the selectors, where an OR of
// ANDs (DNF) can need exponentially many.
func wire(n *node, steps []Step, first int, onMatch, onMiss uint8) int {
	switch n.op {
	case "sel":
		steps[first].OnMatch, steps[first].OnMiss = onMatch, onMiss
		return 1
	case "not":
		return wire(n.kids[0], steps, first, onMiss, onMatch)
	}
	left := countSelectors(n.kids[0])
	right := uint8(first + left) // the right side's first step
	if n.op == "and" {
		wire(n.kids[0], steps, first, right, onMiss)
	} else {
		wire(n.kids[0], steps, first, onMatch, right)
	}
	return left + wire(n.kids[1], steps, first+left, onMatch, onMiss)
}

func countSelectors(n *node) int {
	if n.op == "sel" {
		return 1
	}
	total := 0
	for _, k := range n.kids {
		total += countSelectors(k)
	}
	return total
}

// selectors lists the tree's selectors in the order they are written.
func selectors(n *node, out []*node) []*node {
	if n.op == "sel" {
		return append(out, n)
	}
	for _, k := range n.kids {
		out = selectors(k, out)
	}
	return out
}

// MaxExprBytes bounds the text of a selector or actor expression: with
// at most MaxSteps steps, 32 IPv6 tuples with ports fit in half of it.
// It also bounds how deeply parentheses and nots nest, so reading any
// expression costs time and memory in proportion to its length.
const MaxExprBytes = 8192

// Compile checks and compiles a selector expression and an actor list.
// Nothing is touched in the kernel: a bad chain is refused here. Its cost
// is linear in the length of the expressions, which are bounded.
func Compile(selectExpr, actExpr string, actors map[string]bool) (*Program, error) {
	for _, e := range []struct{ what, text string }{{"select", selectExpr}, {"act", actExpr}} {
		if len(e.text) > MaxExprBytes {
			return nil, &ExprError{e.what, strings.ToValidUTF8(e.text[:64], "") + "…", 0, fmt.Sprintf("the expression is %d bytes long; at most %d are read", len(e.text), MaxExprBytes)}
		}
	}
	prog := &Program{}
	if strings.TrimSpace(selectExpr) != "" {
		toks, err := lex("select", selectExpr)
		if err != nil {
			return nil, err
		}
		p := &parser{what: "select", src: selectExpr, toks: toks, maxCalls: MaxSteps - 1,
			limitMsg: fmt.Sprintf("more than %d selectors: a chain has at most %d steps, one per selector and one per actor (and at least one actor)", MaxSteps-1, MaxSteps)}
		tree, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if t := p.peek(); t.kind != "eof" {
			return nil, p.errf(t.col, "unexpected %q (join selectors with and, or, not and parentheses)", t.text)
		}
		for _, n := range selectors(tree, nil) {
			st, err := compileSelector(p, n)
			if err != nil {
				return nil, err
			}
			prog.Steps = append(prog.Steps, st)
		}
		wire(tree, prog.Steps, 0, uint8(len(prog.Steps)), stepNone)
	}
	prog.FirstActor = len(prog.Steps)
	acts, err := compileActors(actExpr, actors, MaxSteps-len(prog.Steps))
	if err != nil {
		return nil, err
	}
	if len(acts) == 0 {
		return nil, &ExprError{"act", actExpr, 0, "a chain needs at least one actor (" + strings.Join(ActorNames(actors), ", ") + ")"}
	}
	prog.Steps = append(prog.Steps, acts...)
	return prog, nil
}

// SelectorNames lists the selectors.
var SelectorNames = []string{"tuple", "pair", "src", "dst", "seq", "dseq", "type"}

func compileSelector(p *parser, n *node) (Step, error) {
	st := Step{Text: n.text}
	bad := func(col int, f string, a ...any) (Step, error) { return st, p.errf(col, f, a...) }
	switch n.name {
	case "tuple", "pair":
		st.Prog = "sel_tuple"
		var src, dst netip.AddrPort
		var hasSrc, hasDst bool
		for i, a := range n.args {
			key := a.key
			if key == "" {
				key = []string{"src", "dst"}[min(i, 1)]
			}
			ap, err := parseEndpoint(a.val, n.name == "tuple")
			if err != nil {
				return bad(a.col, "%s: %v", n.name, err)
			}
			switch key {
			case "src":
				src, hasSrc = ap, true
			case "dst":
				dst, hasDst = ap, true
			default:
				return bad(a.col, "%s takes src= and dst=, not %q", n.name, key)
			}
		}
		if !hasSrc && !hasDst {
			return bad(n.col, "%s needs src= and/or dst= (e.g. %s(src=10.1.0.1:5000, dst=10.2.0.2:80))", n.name, n.name)
		}
		if n.name == "pair" && (!hasSrc || !hasDst) {
			return bad(n.col, "pair needs both addresses: pair(10.1.0.1, 10.2.0.2)")
		}
		if hasSrc && hasDst && src.Addr().Is4() != dst.Addr().Is4() {
			return bad(n.col, "%s mixes IPv4 and IPv6", n.name)
		}
		v6 := (hasSrc && !src.Addr().Is4()) || (hasDst && !dst.Addr().Is4())
		if v6 {
			st.Args[0] = 1
		}
		if hasSrc {
			st.Args[1] = 1
			putAddr(st.Args[8:24], src.Addr())
			binary.BigEndian.PutUint16(st.Args[4:], src.Port())
		}
		if hasDst {
			st.Args[2] = 1
			putAddr(st.Args[24:40], dst.Addr())
			binary.BigEndian.PutUint16(st.Args[6:], dst.Port())
		}
	case "src", "dst":
		st.Prog = "sel_prefix"
		if len(n.args) != 1 || n.args[0].key != "" {
			return bad(n.col, "%s takes one prefix or address: %s(10.0.0.0/8)", n.name, n.name)
		}
		pfx, err := parsePrefix(n.args[0].val)
		if err != nil {
			return bad(n.args[0].col, "%s: %v", n.name, err)
		}
		if !pfx.Addr().Is4() {
			st.Args[0] = 1
		}
		if n.name == "dst" {
			st.Args[1] = 1
		}
		st.Args[2] = byte(pfx.Bits())
		putAddr(st.Args[4:20], pfx.Addr())
	case "seq", "dseq":
		st.Prog = "sel_seq"
		if len(n.args) != 2 {
			return bad(n.col, "%s takes a range: %s(FROM, TO), sequence numbers with FROM included and TO not", n.name, n.name)
		}
		var lohi [2]uint64
		for i, a := range n.args {
			v, err := strconv.ParseUint(a.val, 0, 64)
			if err != nil || a.key != "" {
				return bad(a.col, "%s: %q is not a sequence number (a whole number, decimal or 0x…)", n.name, a.val)
			}
			lohi[i] = v
		}
		if n.name == "seq" && (lohi[0] > 0xffffffff || lohi[1] > 0xffffffff+1) {
			return bad(n.col, "seq: subflow sequence numbers are 32-bit")
		}
		if n.name == "dseq" {
			binary.NativeEndian.PutUint32(st.Args[0:], 1)
		}
		binary.NativeEndian.PutUint64(st.Args[8:], lohi[0])
		binary.NativeEndian.PutUint64(st.Args[16:], lohi[1])
	case "type":
		st.Prog = "sel_type"
		if len(n.args) == 0 {
			return bad(n.col, "type needs packet types: type(%s)", strings.Join(typeNames(), "|"))
		}
		var mask uint32
		for _, a := range n.args {
			for _, t := range strings.Split(a.val, "|") {
				bit, ok := packetTypes[strings.TrimSpace(t)]
				if !ok || a.key != "" {
					return bad(a.col, "type: %q is not a packet type (valid: %s)", t, strings.Join(typeNames(), ", "))
				}
				mask |= bit
			}
		}
		binary.NativeEndian.PutUint32(st.Args[0:], mask)
	default:
		return bad(n.col, "unknown selector %q (valid: %s)", n.name, strings.Join(SelectorNames, ", "))
	}
	return st, nil
}

func typeNames() []string {
	var out []string
	for k := range packetTypes {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func putAddr(dst []byte, a netip.Addr) {
	if a.Is4() {
		b := a.As4()
		copy(dst, b[:])
		return
	}
	b := a.As16()
	copy(dst, b[:])
}

// parseEndpoint reads ADDR, ADDR:PORT or [V6]:PORT.
func parseEndpoint(s string, ports bool) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if !ports {
			return ap, fmt.Errorf("%q: pair takes addresses without ports (use tuple for ports)", s)
		}
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not an address or address:port", s)
	}
	return netip.AddrPortFrom(a.Unmap(), 0), nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a prefix or address", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ---- actors ----------------------------------------------------------------

// BuiltinActors are the actors every chain can use.
var BuiltinActors = []string{"set_backup", "clear_backup", "strip_add_addr", "clamp_rwnd", "drop", "mark", "count"}

// ActorNames lists built-in and loaded actors.
func ActorNames(user map[string]bool) []string {
	out := append([]string(nil), BuiltinActors...)
	for k := range user {
		out = append(out, k)
	}
	sort.Strings(out[len(BuiltinActors):])
	return out
}

// compileActors reads the actor list; room is how many steps the
// selectors left.
func compileActors(expr string, user map[string]bool, room int) ([]Step, error) {
	toks, err := lex("act", expr)
	if err != nil {
		return nil, err
	}
	p := &parser{what: "act", src: expr, toks: toks, maxCalls: room,
		limitMsg: fmt.Sprintf("the chain has more than %d steps (%d selectors, more than %d actors); at most %d fit (its program is built for that many)", MaxSteps, MaxSteps-room, room, MaxSteps)}
	var out []Step
	for p.peek().kind != "eof" {
		if t := p.peek(); t.kind == "word" && (t.text == "and" || t.text == "or" || t.text == "not") {
			return nil, p.errf(t.col, "actors are a list (one after another), not an expression")
		}
		n, err := p.parseCall()
		if err != nil {
			return nil, err
		}
		st, err := compileActor(p, n, user)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
		if p.peek().kind == "," {
			p.next()
		}
	}
	return out, nil
}

func compileActor(p *parser, n *node, user map[string]bool) (Step, error) {
	st := Step{Text: n.text}
	bad := func(col int, f string, a ...any) (Step, error) { return st, p.errf(col, f, a...) }
	noArgs := func() error {
		if len(n.args) > 0 {
			return p.errf(n.args[0].col, "%s takes no arguments", n.name)
		}
		return nil
	}
	switch n.name {
	case "set_backup", "clear_backup":
		st.Prog = "act_set_backup"
		if n.name == "set_backup" {
			st.Args[0] = 1
		}
		for _, a := range n.args {
			if a.key != "" || a.val != "force" {
				return bad(a.col, "%s takes only the word force (inject even where no local socket shows the flag)", n.name)
			}
			st.Args[1] = 1
		}
	case "strip_add_addr":
		st.Prog = "act_strip_add_addr"
		if err := noArgs(); err != nil {
			return st, err
		}
	case "drop":
		st.Prog = "act_drop"
		if err := noArgs(); err != nil {
			return st, err
		}
	case "count":
		st.Prog = "act_count"
		if err := noArgs(); err != nil {
			return st, err
		}
	case "mark":
		st.Prog = "act_mark"
		if len(n.args) == 0 {
			return bad(n.col, "mark needs mark=N and/or classid=MAJOR:MINOR")
		}
		for _, a := range n.args {
			key := a.key
			if key == "" {
				key = "mark"
			}
			switch key {
			case "mark":
				v, err := strconv.ParseUint(a.val, 0, 32)
				if err != nil {
					return bad(a.col, "mark: %q is not a 32-bit number", a.val)
				}
				binary.NativeEndian.PutUint32(st.Args[0:], uint32(v))
				st.Args[8] = 1
			case "classid":
				maj, min, ok := strings.Cut(a.val, ":")
				hi, err1 := strconv.ParseUint(maj, 16, 16)
				lo, err2 := strconv.ParseUint(min, 16, 16)
				if !ok || err1 != nil || err2 != nil {
					return bad(a.col, "classid: %q is not MAJOR:MINOR in hex (e.g. 1:10)", a.val)
				}
				binary.NativeEndian.PutUint32(st.Args[4:], uint32(hi<<16|lo))
				st.Args[9] = 1
			default:
				return bad(a.col, "mark takes mark= and classid=, not %q", key)
			}
		}
	case "clamp_rwnd":
		st.Prog = "act_clamp_rwnd"
		if len(n.args) == 0 || len(n.args) > 2 {
			return bad(n.col, "clamp_rwnd takes a rate (10mbit) or a window (64KiB), and optionally egress")
		}
		for _, a := range n.args {
			if a.val == "egress" && a.key == "" {
				binary.NativeEndian.PutUint32(st.Args[12:], 1)
				continue
			}
			if r, err := units.ParseRate(a.val); err == nil {
				if r < 8000 {
					return bad(a.col, "clamp_rwnd: %s is below 1 kB/s", r)
				}
				binary.NativeEndian.PutUint64(st.Args[0:], uint64(r.BytesPerSecond()))
				continue
			}
			sz, err := units.ParseSize(a.val)
			if err != nil {
				return bad(a.col, "clamp_rwnd: %q is neither a rate (10mbit, 1MB/s) nor a window size (64KiB)", a.val)
			}
			if sz < 1448 || sz > 1<<30 {
				return bad(a.col, "clamp_rwnd: a window of %s is outside 1448B to 1GiB", sz)
			}
			binary.NativeEndian.PutUint32(st.Args[8:], uint32(sz))
		}
	default:
		if user[n.name] {
			st.Prog = "user:" + n.name
			for i, a := range n.args {
				if i >= argsLen/8 {
					return bad(a.col, "a loaded actor takes at most %d arguments", argsLen/8)
				}
				v, err := strconv.ParseInt(a.val, 0, 64)
				if err != nil {
					return bad(a.col, "%s: arguments of a loaded actor are whole numbers; %q is not", n.name, a.val)
				}
				binary.NativeEndian.PutUint64(st.Args[8*i:], uint64(v))
			}
			return st, nil
		}
		return bad(n.col, "unknown actor %q (valid: %s)", n.name, strings.Join(ActorNames(user), ", "))
	}
	return st, nil
}
