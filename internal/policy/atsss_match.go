package policy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Traffic descriptors of the atsss section (atsss.go): which connections a
// rule steers, by the connection's server end (destination prefixes and
// ports) and by its application (a cgroup), and the analysis that refuses
// a rule list where a rule can never match or two rules overlap in part.

// TrafficDescriptor selects connections. An empty field matches any
// connection; a connection matches when it matches every field given.
type TrafficDescriptor struct {
	// To: the server end's address lies in one of these prefixes.
	To []netip.Prefix
	// Ports: the server end's port lies in one of these ranges.
	Ports []PortRange
	// Cgroup: the application's cgroup, or one below it.
	Cgroup string
}

// PortRange is an inclusive range of ports.
type PortRange struct{ From, To uint16 }

func (r PortRange) String() string {
	if r.From == r.To {
		return strconv.Itoa(int(r.From))
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// ParsePortRange reads 443 or 8000-8100.
func ParsePortRange(s string) (PortRange, error) {
	from, to, ranged := strings.Cut(s, "-")
	a, err1 := strconv.Atoi(strings.TrimSpace(from))
	b := a
	var err2 error
	if ranged {
		b, err2 = strconv.Atoi(strings.TrimSpace(to))
	}
	if err1 != nil || err2 != nil || a < 1 || b > 65535 || b < a {
		return PortRange{}, fmt.Errorf("%q is not a port or a range of ports (1 to 65535, e.g. 443 or 8000-8100)", s)
	}
	return PortRange{uint16(a), uint16(b)}, nil
}

// ParseDestination reads a prefix (10.2.0.0/16, 2001:db8::/32) or an
// address (a prefix of its full length).
func ParseDestination(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Masked() != p {
			return netip.Prefix{}, fmt.Errorf("%q has bits set beyond its length: write %s", s, p.Masked())
		}
		return p, nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("%q is neither an address nor a prefix (e.g. 10.2.0.0/16, 2001:db8::/32, 203.0.113.7)", s)
}

// fields names the fields the descriptor selects by.
func (d TrafficDescriptor) fields() string {
	var f []string
	if len(d.To) > 0 {
		f = append(f, "to")
	}
	if len(d.Ports) > 0 {
		f = append(f, "ports")
	}
	if d.Cgroup != "" {
		f = append(f, "cgroup")
	}
	return strings.Join(f, " and ")
}

// Any reports whether the descriptor matches every connection.
func (d TrafficDescriptor) Any() bool { return len(d.To) == 0 && len(d.Ports) == 0 && d.Cgroup == "" }

func (d TrafficDescriptor) String() string {
	var parts []string
	if len(d.To) > 0 {
		var s []string
		for _, p := range d.To {
			s = append(s, p.String())
		}
		parts = append(parts, "to "+strings.Join(s, ", "))
	}
	if len(d.Ports) > 0 {
		var s []string
		for _, p := range d.Ports {
			s = append(s, p.String())
		}
		parts = append(parts, "port "+strings.Join(s, ", "))
	}
	if d.Cgroup != "" {
		parts = append(parts, "cgroup "+d.Cgroup)
	}
	if len(parts) == 0 {
		return "any connection"
	}
	return strings.Join(parts, ", ")
}

// ServerEnd is the end of a connection a descriptor's destination names:
// the peer's on a connection this host opened, this host's own on one the
// peer opened. Invalid when the connection's addresses are not known yet.
func ServerEnd(c *Conn) netip.AddrPort {
	if c.ServerSide {
		return c.Local
	}
	return c.Remote
}

// Match reports whether a connection matches; known is false when a field
// the descriptor has cannot be judged yet (the connection's addresses are
// not known).
func (d TrafficDescriptor) Match(c *Conn) (match, known bool) {
	if len(d.To) > 0 || len(d.Ports) > 0 {
		end := ServerEnd(c)
		if !end.IsValid() {
			return false, false
		}
		// By the same numbering as the analysis below: an IPv4 address lies
		// in ::ffff:0:0/96 (and in ::/0).
		a := addrU128(end.Addr())
		if len(d.To) > 0 && !slices.ContainsFunc(d.To, func(p netip.Prefix) bool {
			lo, hi := prefixRange(p)
			return !a.less(lo) && !hi.less(a)
		}) {
			return false, true
		}
		if len(d.Ports) > 0 && !slices.ContainsFunc(d.Ports, func(r PortRange) bool { return end.Port() >= r.From && end.Port() <= r.To }) {
			return false, true
		}
	}
	if d.Cgroup != "" && !InCgroup(c.Cgroup, d.Cgroup) {
		return false, true
	}
	return true, true
}

// The analysis treats a descriptor as a set of connections: the product
// of an address set, a port set and a cgroup subtree. Addresses are 128-bit
// numbers (IPv4 as IPv4-mapped IPv6), so every set is a union of
// intervals on a line.

type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

func (a u128) next() u128 {
	if a.lo == ^uint64(0) {
		return u128{a.hi + 1, 0}
	}
	return u128{a.hi, a.lo + 1}
}

func (a u128) prev() u128 {
	if a.lo == 0 {
		return u128{a.hi - 1, ^uint64(0)}
	}
	return u128{a.hi, a.lo - 1}
}

var u128Max = u128{^uint64(0), ^uint64(0)}

func addrU128(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func u128Addr(v u128) netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], v.hi)
	binary.BigEndian.PutUint64(b[8:], v.lo)
	return netip.AddrFrom16(b).Unmap()
}

// prefixRange is a prefix's first and last address.
func prefixRange(p netip.Prefix) (u128, u128) {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	first := addrU128(p.Masked().Addr())
	last := first
	host := 128 - bits
	switch {
	case host >= 64:
		last.lo = ^uint64(0)
		if host > 64 {
			last.hi |= ^uint64(0) >> (128 - host)
		}
	case host > 0:
		last.lo |= ^uint64(0) >> (64 - host)
	}
	return first, last
}

// box is a set of connections: an interval of addresses times an
// interval of ports.
type box struct {
	aLo, aHi u128
	pLo, pHi uint16
}

func (b box) empty() bool { return b.aHi.less(b.aLo) || b.pHi < b.pLo }

func (b box) intersect(o box) box {
	r := b
	if r.aLo.less(o.aLo) {
		r.aLo = o.aLo
	}
	if o.aHi.less(r.aHi) {
		r.aHi = o.aHi
	}
	r.pLo, r.pHi = max(r.pLo, o.pLo), min(r.pHi, o.pHi)
	return r
}

// minus is b without o, as at most four disjoint boxes.
func (b box) minus(o box) []box {
	in := b.intersect(o)
	if in.empty() {
		return []box{b}
	}
	var out []box
	if b.aLo.less(in.aLo) {
		out = append(out, box{b.aLo, in.aLo.prev(), b.pLo, b.pHi})
	}
	if in.aHi.less(b.aHi) {
		out = append(out, box{in.aHi.next(), b.aHi, b.pLo, b.pHi})
	}
	if b.pLo < in.pLo {
		out = append(out, box{in.aLo, in.aHi, b.pLo, in.pLo - 1})
	}
	if in.pHi < b.pHi {
		out = append(out, box{in.aLo, in.aHi, in.pHi + 1, b.pHi})
	}
	return out
}

func (b box) String() string {
	var to, port string
	if b.aLo == (u128{}) && b.aHi == u128Max {
		to = "any address"
	} else if b.aLo == b.aHi {
		to = u128Addr(b.aLo).String()
	} else {
		to = u128Addr(b.aLo).String() + "–" + u128Addr(b.aHi).String()
	}
	switch {
	case b.pLo <= 1 && b.pHi == 65535:
		port = "any port"
	case b.pLo == b.pHi:
		port = fmt.Sprintf("port %d", b.pLo)
	default:
		port = fmt.Sprintf("ports %d-%d", b.pLo, b.pHi)
	}
	return to + ", " + port
}

// boxes is the descriptor's address and port sets as boxes (its cgroup
// apart).
func (d TrafficDescriptor) boxes() []box {
	type span struct{ lo, hi u128 }
	addrs := []span{{u128{}, u128Max}}
	if len(d.To) > 0 {
		addrs = nil
		for _, p := range d.To {
			lo, hi := prefixRange(p)
			addrs = append(addrs, span{lo, hi})
		}
	}
	ports := []PortRange{{1, 65535}} // no connection has port 0
	if len(d.Ports) > 0 {
		ports = d.Ports
	}
	var out []box
	for _, a := range addrs {
		for _, p := range ports {
			out = append(out, box{a.lo, a.hi, p.From, p.To})
		}
	}
	return out
}

// maxCoverBoxes bounds the pieces the coverage check keeps: beyond it,
// it gives up (and reports nothing) rather than spend unbounded time.
const maxCoverBoxes = 4096

// cover subtracts the subtrahends from the boxes; ok is false when the
// work grew beyond maxCoverBoxes.
func cover(rest []box, minus []box) ([]box, bool) {
	for _, m := range minus {
		var next []box
		for _, b := range rest {
			next = append(next, b.minus(m)...)
		}
		if len(next) > maxCoverBoxes {
			return nil, false
		}
		rest = next
	}
	return rest, true
}

// cgroupWithin reports whether every connection of cgroup scope a is in
// scope b ("" is every connection).
func cgroupWithin(a, b string) bool { return b == "" || a != "" && InCgroup(a, b) }

// Within reports whether every connection d matches, o matches too.
func (d TrafficDescriptor) Within(o TrafficDescriptor) bool {
	if !cgroupWithin(d.Cgroup, o.Cgroup) {
		return false
	}
	rest, ok := cover(d.boxes(), o.boxes())
	return ok && len(rest) == 0
}

// Overlap returns a part of what both match (a box's text), or "" when
// no connection matches both.
func (d TrafficDescriptor) Overlap(o TrafficDescriptor) string {
	if !cgroupWithin(d.Cgroup, o.Cgroup) && !cgroupWithin(o.Cgroup, d.Cgroup) {
		return ""
	}
	for _, a := range d.boxes() {
		for _, b := range o.boxes() {
			if in := a.intersect(b); !in.empty() {
				s := in.String()
				cg := o.Cgroup // the narrower scope of the two
				if cgroupWithin(d.Cgroup, o.Cgroup) {
					cg = d.Cgroup
				}
				if cg != "" {
					s += ", cgroup " + cg
				}
				return s
			}
		}
	}
	return ""
}

// CoveredBy reports whether the descriptors in earlier, together, match
// every connection d matches. Only those whose cgroup scope is d's own or
// wider count (a narrower scope leaves out the processes of d's cgroup
// itself); ok is false when the check gave up (too many pieces).
func (d TrafficDescriptor) CoveredBy(earlier []TrafficDescriptor) (covered, ok bool) {
	var minus []box
	for _, e := range earlier {
		if cgroupWithin(d.Cgroup, e.Cgroup) {
			minus = append(minus, e.boxes()...)
		}
	}
	if len(minus) == 0 {
		return false, true
	}
	rest, ok := cover(d.boxes(), minus)
	return ok && len(rest) == 0, ok
}
