package datapath

import (
	"fmt"
	"net/netip"
	"strings"
)

// Withheld is an ADD_ADDR option strip_add_addr kept back.
type Withheld struct {
	AddrID   uint32 `json:"addr_id"`
	Subflow  string `json:"subflow"`
	Option   string `json:"option_hex"`
	Released bool   `json:"released"`
}

// Release marks every ADD_ADDR a chain withheld for re-injection into the
// next packet of its subflow, and makes sure the chain sees those packets:
// its selector is widened (atomically) by the 4-tuples of the subflows
// concerned. It returns how many options were released.
func (m *Manager) Release(id uint32) (int, error) {
	m.ops.Lock()
	defer m.ops.Unlock()
	c, ok := m.chains[id]
	if !ok {
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
		if k.Chain == id && v.Release == 0 {
			todo = append(todo, kv{k, v})
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	if len(todo) == 0 {
		return 0, nil
	}
	sel := strings.TrimSpace(c.spec.Select)
	seen := map[string]bool{}
	var extra []string
	for _, e := range todo {
		src, dst, _ := strings.Cut(keySubflow(e.k), "→")
		t := fmt.Sprintf("tuple(src=%s, dst=%s)", src, dst)
		if !seen[t] && !strings.Contains(sel, t) {
			seen[t] = true
			extra = append(extra, t)
		}
	}
	if len(extra) > 0 && sel != "" {
		widened := "(" + sel + ") or " + strings.Join(extra, " or ")
		if _, err := m.replace(id, widened, c.spec.Act); err != nil {
			return 0, fmt.Errorf("widen chain %d to see the subflows to release into: %w", id, err)
		}
	}
	// Pending first: a packet that sees a released option must look.
	if err := m.objs.MpsteerReleasePending.Put(id, uint32(1)); err != nil {
		return 0, err
	}
	for _, e := range todo {
		e.v.Release = 1
		if err := m.objs.MpsteerWithheld.Put(&e.k, &e.v); err != nil {
			return 0, err
		}
	}
	return len(todo), nil
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
