package helpercost

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Helper is one helper's program.
type Helper struct {
	// Key names it in results (e.g. "sk_lookup"); Name says what it calls.
	Key, Name string
	Prog      *ebpf.Program
	// Single: it grows the packet, so it must run once per packet (the
	// kernel's repeat loop would run it again on its own output).
	Single bool
}

// Set is the loaded programs.
type Set struct {
	objs    helpercostObjects
	Helpers []Helper
}

// Load loads the programs; the lookups look for the local socket of the
// flow whose packets come from peer to local (IPv4), in the namespace the
// programs run in.
func Load(peer, local netip.AddrPort) (*Set, error) {
	peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	if !peer.Addr().Is4() || !local.Addr().Is4() {
		return nil, errors.New("helpercost: the lookup is timed on an IPv4 flow")
	}
	spec, err := loadHelpercost()
	if err != nil {
		return nil, err
	}
	// Addresses and ports as the packet has them (network byte order);
	// the variables are read as the host's integers.
	be32 := func(a netip.Addr) uint32 { b := a.As4(); return binary.NativeEndian.Uint32(b[:]) }
	be16 := func(p uint16) uint16 {
		var b [2]byte
		binary.BigEndian.PutUint16(b[:], p)
		return binary.NativeEndian.Uint16(b[:])
	}
	for name, v := range map[string]any{"saddr": be32(peer.Addr()), "daddr": be32(local.Addr()), "sport": be16(peer.Port()), "dport": be16(local.Port())} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("helpercost: %s: %w", name, err)
		}
	}
	s := &Set{}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("helpercost: %w", err)
	}
	p := s.objs.helpercostPrograms
	s.Helpers = []Helper{
		{Key: "sk_lookup", Name: "bpf_sk_lookup_tcp + bpf_sk_release (find the packet's socket)", Prog: p.SkLookup},
		{Key: "load_bytes", Name: "bpf_skb_load_bytes, 40 bytes", Prog: p.LoadBytes},
		{Key: "store_bytes", Name: "bpf_skb_store_bytes, 4 bytes", Prog: p.StoreBytes},
		{Key: "l4_csum_replace", Name: "bpf_l4_csum_replace", Prog: p.L4CsumReplace},
		{Key: "csum_diff", Name: "bpf_csum_diff, 20 bytes", Prog: p.CsumDiff},
		{Key: "change_tail", Name: "bpf_skb_change_tail, 4 bytes more (a packet grows)", Prog: p.ChangeTail, Single: true},
		{Key: "ktime", Name: "bpf_ktime_get_ns", Prog: p.Ktime},
		{Key: "ktime_coarse", Name: "bpf_ktime_get_coarse_ns", Prog: p.KtimeCoarse},
		{Key: "hash_lookup", Name: "bpf_map_lookup_elem, hash map, 48-byte key", Prog: p.HashLookup},
	}
	return s, nil
}

// Found is how many lookups found the socket.
func (s *Set) Found() (uint64, error) {
	var n uint64
	err := s.objs.Found.Get(&n)
	return n, err
}

// Close unloads the programs.
func (s *Set) Close() error { return s.objs.Close() }
