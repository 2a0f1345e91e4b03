package datapath

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Chains on a clsact qdisc run in the order of their filters' priorities
// (lower first). The first chain of a hook takes prioFirst; one added
// last the last chain's priority plus prioStep (255 fit), one added first
// the first's minus prioStep, one placed between two chains the middle of
// theirs. Where two neighbours have none between them, the hook's chains
// are renumbered (each moved as Move moves a chain).
const (
	prioFirst = 0x8000
	prioStep  = 128
)

// clsactAttachment is a BPF filter (direct action) at its own priority,
// handle 1, on the device's clsact qdisc. Unlike a TCX link it outlives
// the process: a manager removes the filters of managers that are gone
// (by the process id in their names) as it attaches to a device.
type clsactAttachment struct {
	m      *Manager
	dev    *clsactDev
	filter netlink.BpfFilter
}

func (a *clsactAttachment) prio() uint16 { return a.filter.Priority }

func (a *clsactAttachment) update(p *ebpf.Program) error {
	f := a.filter
	f.Fd = p.FD()
	if err := a.dev.h.FilterReplace(&f); err != nil {
		return fmt.Errorf("tc filter replace: %w", err)
	}
	a.filter = f
	return nil
}

func (a *clsactAttachment) detach() error {
	if err := a.dev.h.FilterDel(&a.filter); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("tc filter del: %w", err)
	}
	a.m.releaseClsactDev(a.dev)
	return nil
}

// clsactDev is a device with chains on its clsact qdisc, in a network
// namespace: the netlink handle that reaches it, whether this manager
// added the qdisc (then it removes it with its last chain, if no other
// filter is left on it), and how many of its chains are there.
type clsactDev struct {
	key     string // namespace and device
	h       *netlink.Handle
	ifindex int
	added   bool
	filters int
}

// clsactDevFor returns the device of chain c (with m.mu held), adding its
// clsact qdisc if it has none and removing the filters of managers that
// are gone.
func (m *Manager) clsactDevFor(c *chain) (*clsactDev, error) {
	key := fmt.Sprintf("%s/%d", c.netns, c.ifindex)
	if d, ok := m.clsact[key]; ok {
		return d, nil
	}
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("tc: this network namespace: %w", err)
	}
	h, err := netlink.NewHandleAt(ns)
	ns.Close()
	if err != nil {
		return nil, fmt.Errorf("tc: netlink: %w", err)
	}
	d := &clsactDev{key: key, h: h, ifindex: c.ifindex}
	l, err := h.LinkByIndex(c.ifindex)
	if err == nil {
		var qs []netlink.Qdisc
		if qs, err = h.QdiscList(l); err == nil {
			have := false
			for _, q := range qs {
				have = have || q.Type() == "clsact"
			}
			if !have {
				err = h.QdiscAdd(&netlink.Clsact{QdiscAttrs: clsactQdisc(c.ifindex)})
				d.added = err == nil
				if errors.Is(err, unix.EEXIST) { // added meanwhile, not by us
					err = nil
				}
			}
		}
	}
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("tc: clsact qdisc on %s: %w", c.spec.Dev, err)
	}
	removeStaleFilters(d, l)
	m.clsact[key] = d
	return d, nil
}

func clsactQdisc(ifindex int) netlink.QdiscAttrs {
	return netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}
}

// releaseClsactDev forgets a chain of d; with its last, the qdisc goes if
// this manager added it and no filter is left on it.
func (m *Manager) releaseClsactDev(d *clsactDev) {
	if d.filters--; d.filters > 0 {
		return
	}
	delete(m.clsact, d.key)
	defer d.h.Close()
	if !d.added {
		return
	}
	l, err := d.h.LinkByIndex(d.ifindex)
	if err != nil {
		return // the device is gone, and its qdisc with it
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		if fs, err := d.h.FilterList(l, parent); err != nil || len(fs) > 0 {
			return // someone else's filters: the qdisc stays
		}
	}
	d.h.QdiscDel(&netlink.Clsact{QdiscAttrs: clsactQdisc(d.ifindex)})
}

// filterName names a chain's filter after the process, so that a later
// manager can tell a dead one's filters (tc filters are not tied to a
// process as TCX links are).
func filterName(id uint32) string { return fmt.Sprintf("mpsteer-%d-%d", os.Getpid(), id) }

// removeStaleFilters removes the chain filters of processes that no
// longer run: a crashed daemon's chains, which would otherwise go on
// steering.
func removeStaleFilters(d *clsactDev, l netlink.Link) {
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := d.h.FilterList(l, parent)
		if err != nil {
			continue
		}
		for _, f := range fs {
			bf, ok := f.(*netlink.BpfFilter)
			if !ok {
				continue
			}
			rest, ok := strings.CutPrefix(bf.Name, "mpsteer-")
			pid, _, _ := strings.Cut(rest, "-")
			n, err := strconv.Atoi(pid)
			if !ok || err != nil || n <= 0 || syscall.Kill(n, 0) != unix.ESRCH {
				continue
			}
			d.h.FilterDel(bf)
		}
	}
}

// clsactOrder is the chains on c's hook attached with tc, by priority;
// with c itself if withC.
func (m *Manager) clsactOrder(c *chain, withC bool) []*chain {
	var out []*chain
	for _, o := range m.chains {
		if _, ok := o.att.(*clsactAttachment); ok && (o != c || withC) && hookOf(o) == hookOf(c) {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].att.(*clsactAttachment).prio() < out[j].att.(*clsactAttachment).prio()
	})
	return out
}

// prioAt picks a priority for position pos among chains with priorities
// prios (ascending); false: none is free there.
func prioAt(prios []int, pos int) (uint16, bool) {
	lo, hi := 0, 0x10000
	if pos > 0 {
		lo = prios[pos-1]
	}
	if pos < len(prios) {
		hi = prios[pos]
	}
	switch {
	case len(prios) == 0:
		return prioFirst, true
	case pos == len(prios) && lo+prioStep < hi:
		return uint16(lo + prioStep), true
	case pos == 0 && hi-prioStep > lo:
		return uint16(hi - prioStep), true
	case hi-lo >= 2:
		return uint16(lo + (hi-lo)/2), true
	}
	return 0, false
}

// clsactPrio is the priority of chain c at place at (c's other chains on
// the hook as they are, c itself left out), renumbering the hook's chains
// when there is none. For a chain already there it may be its own: then
// it is in that place already.
func (m *Manager) clsactPrio(c *chain, at place) (uint16, error) {
	for range 2 {
		order := m.clsactOrder(c, false)
		pos := len(order)
		if at.ref != nil {
			pos = slices.Index(order, at.ref)
			if pos < 0 {
				return 0, fmt.Errorf("chain %d is not attached with tc on %s %s", at.ref.spec.ID, c.spec.Dev, c.spec.Hook)
			}
			if !at.before {
				pos++
			}
		}
		prios := make([]int, len(order))
		for i, o := range order {
			prios[i] = int(o.att.(*clsactAttachment).prio())
		}
		if prio, ok := prioAt(prios, pos); ok {
			return prio, nil
		}
		if err := m.renumberClsact(m.clsactOrder(c, true)); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("tc: no priority free for chain %d on %s %s", c.spec.ID, c.spec.Dev, c.spec.Hook)
}

// renumberClsact spreads the priorities of a hook's chains (in their
// order) evenly over values none of them has now, so that no new filter
// meets an old one, by moving each chain (a new instance of its program
// at its new priority; its old one paused, then removed). Chains that go
// down move first, from the first on, then those that go up, from the
// last: at every step the chains are in their order. The verifier checks
// each moved chain with m.mu held (renumbering is rare: it takes eight
// chains placed one after another at one place).
func (m *Manager) renumberClsact(order []*chain) error {
	n := len(order)
	step := min(prioStep, 0xfffe/(n+1))
	taken := map[int]bool{}
	cur := make([]int, n)
	for i, o := range order {
		cur[i] = int(o.att.(*clsactAttachment).prio())
		taken[cur[i]] = true
	}
	off := -1
	for o := 0; o < step && off < 0; o++ {
		free := true
		for i := range n {
			free = free && !taken[(i+1)*step+o]
		}
		if free {
			off = o
		}
	}
	if step < 2 || off < 0 {
		return fmt.Errorf("tc: no room to renumber %d chains on one hook", n)
	}
	move := func(i int) error {
		want := uint16((i+1)*step + off)
		o := order[i]
		if err := m.reattach(o, func(c *chain, p *ebpf.Program) (attachment, error) { return m.attachClsactAt(c, p, want) }); err != nil {
			return fmt.Errorf("tc: renumber chain %d: %w", o.spec.ID, err)
		}
		return nil
	}
	for i := range n {
		if (i+1)*step+off < cur[i] {
			if err := move(i); err != nil {
				return err
			}
		}
	}
	for i := n - 1; i >= 0; i-- {
		if (i+1)*step+off > cur[i] {
			if err := move(i); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *Manager) attachClsact(c *chain, prog *ebpf.Program, at place) (attachment, error) {
	prio, err := m.clsactPrio(c, at)
	if err != nil {
		return nil, err
	}
	return m.attachClsactAt(c, prog, prio)
}

// attachClsactAt adds c's filter at priority prio.
func (m *Manager) attachClsactAt(c *chain, prog *ebpf.Program, prio uint16) (attachment, error) {
	d, err := m.clsactDevFor(c)
	if err != nil {
		return nil, err
	}
	parent := uint32(netlink.HANDLE_MIN_INGRESS)
	if c.spec.Hook == Egress {
		parent = netlink.HANDLE_MIN_EGRESS
	}
	a := &clsactAttachment{m: m, dev: d, filter: netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: c.ifindex, Parent: parent, Handle: 1, Priority: prio, Protocol: unix.ETH_P_ALL},
		Fd:          prog.FD(), Name: filterName(c.spec.ID), DirectAction: true,
	}}
	d.filters++
	if err := d.h.FilterAdd(&a.filter); err != nil {
		m.releaseClsactDev(d)
		return nil, fmt.Errorf("tc filter add on %s %s, priority %d: %w", c.spec.Dev, c.spec.Hook, prio, err)
	}
	return a, nil
}
