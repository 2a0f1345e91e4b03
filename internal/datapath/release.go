package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Withheld is an ADD_ADDR option strip_add_addr kept back.
type Withheld struct {
	AddrID   uint32 `json:"addr_id"`
	Subflow  string `json:"subflow"`
	Option   string `json:"option_hex"`
	Released bool   `json:"released"`
	PutBack  bool   `json:"put_back"` // into a packet of its subflow, after the release
}

// The states of a withheld option (withheld_val.release).
const (
	withheldKept     = 0
	withheldReleased = 1
	withheldPutBack  = 2
)

// Release marks every ADD_ADDR a chain withheld (and has not released
// yet) to be put back into the next packet of its subflow, and returns
// how many. The chain does it from its entry, for packets its selectors
// do not pick as well, so the chain stays as it is, whatever the number
// of subflows and options (bpf/actors/strip_add_addr: what userspace and
// the chain each write).
func (m *Manager) Release(id uint32) (int, error) {
	m.ops.Lock()
	defer m.ops.Unlock()
	if _, ok := m.chains[id]; !ok {
		return 0, fmt.Errorf("no chain %d", id)
	}
	var k stepsWithheldKey
	var v stepsWithheldVal
	type kv struct {
		k stepsWithheldKey
		v stepsWithheldVal
	}
	var todo []kv
	it := m.objs.MpsteerWithheld.Iterate()
	for it.Next(&k, &v) {
		if k.Chain == id && v.Release == withheldKept {
			todo = append(todo, kv{k, v})
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	if len(todo) == 0 {
		return 0, nil
	}
	// The options first (a packet puts back only a released one), then
	// their subflows' bitmaps, then the count that makes the chain look.
	ids := map[stepsWithheldKey]*stepsReleaseIds{}
	for _, e := range todo {
		e.v.Release = withheldReleased
		if err := m.objs.MpsteerWithheld.Put(&e.k, &e.v); err != nil {
			return 0, fmt.Errorf("release chain %d: %w", id, err)
		}
		sub := e.k
		sub.AddrId = 0
		if ids[sub] == nil {
			ids[sub] = &stepsReleaseIds{}
			// Bits released before stay: only this side writes them.
			if err := m.objs.MpsteerReleaseIds.Lookup(&sub, ids[sub]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return 0, err
			}
		}
		ids[sub].W[(e.k.AddrId>>6)&3] |= 1 << (e.k.AddrId & 63)
	}
	for sub, want := range ids {
		// The chain's side (what it put back) is made once, empty.
		if err := m.objs.MpsteerReleasedIds.Update(&sub, &stepsReleased{}, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return 0, fmt.Errorf("release chain %d: %w", id, err)
		}
		if err := m.objs.MpsteerReleaseIds.Put(&sub, want); err != nil {
			return 0, fmt.Errorf("release chain %d: %w", id, err)
		}
	}
	var asked uint64
	if err := m.objs.MpsteerReleaseCount.Lookup(id*2, &asked); err != nil {
		return 0, err
	}
	if err := m.objs.MpsteerReleaseCount.Put(id*2, asked+uint64(len(todo))); err != nil {
		return 0, err
	}
	return len(todo), nil
}

// releasePending is how many options chain id released and has not put
// back yet.
func (m *Manager) releasePending(id uint32) uint64 {
	var asked, done uint64
	if m.objs.MpsteerReleaseCount.Lookup(id*2, &asked) != nil || m.objs.MpsteerReleaseCount.Lookup(id*2+1, &done) != nil {
		return 0
	}
	return asked - done
}

// forgetWithheld drops what chain id withheld and released, once its
// programs are off.
func (m *Manager) forgetWithheld(id uint32) {
	var k stepsWithheldKey
	var v stepsWithheldVal
	var drop []stepsWithheldKey
	it := m.objs.MpsteerWithheld.Iterate()
	for it.Next(&k, &v) {
		if k.Chain == id {
			drop = append(drop, k)
		}
	}
	for _, k := range drop {
		m.objs.MpsteerWithheld.Delete(&k)
	}
	drop = drop[:0]
	var ids stepsReleaseIds
	it = m.objs.MpsteerReleaseIds.Iterate()
	for it.Next(&k, &ids) {
		if k.Chain == id {
			drop = append(drop, k)
		}
	}
	for _, k := range drop {
		m.objs.MpsteerReleaseIds.Delete(&k)
		m.objs.MpsteerReleasedIds.Delete(&k)
	}
	m.objs.MpsteerReleaseCount.Put(id*2, uint64(0))
	m.objs.MpsteerReleaseCount.Put(id*2+1, uint64(0))
}

func keySubflow(k stepsWithheldKey) string {
	addr := func(w [4]uint32) netip.Addr {
		var b [16]byte
		for i, x := range w {
			b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
		}
		if k.V6 == 0 {
			return netip.AddrFrom4([4]byte(b[:4]))
		}
		return netip.AddrFrom16(b)
	}
	port := func(p uint16) uint16 { return p<<8 | p>>8 }
	return fmt.Sprintf("%s→%s", netip.AddrPortFrom(addr(k.Saddr), port(k.Sport)), netip.AddrPortFrom(addr(k.Daddr), port(k.Dport)))
}
