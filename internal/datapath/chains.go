package datapath

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Hook is where a chain runs.
type Hook string

const (
	Ingress Hook = "ingress"
	Egress  Hook = "egress"
)

// ChainSpec describes a chain as a user writes it.
type ChainSpec struct {
	ID     uint32 `json:"id,omitempty"` // 0: the manager picks one
	Dev    string `json:"dev"`
	Hook   Hook   `json:"hook"`
	Select string `json:"select"`
	Act    string `json:"act"`
	// Before/After place the chain before or after another chain on the
	// same hook (default: last).
	Before uint32 `json:"before,omitempty"`
	After  uint32 `json:"after,omitempty"`
}

type chain struct {
	spec    ChainSpec
	prog    *Program
	ifindex int
	l2      uint32
	slot    uint32        // active descriptor slot
	netns   string        // the network namespace of its device
	entry   *ebpf.Program // the chain's program (the one attached)
	cur     *chainProg    // the same, with its pause switch
	att     attachment    // nil: not attached (AddDetached)
	// runtime of the chain's earlier programs (replaced, moved), so
	// that CPUTimeNs covers the chain's whole life
	runtimeBase uint64
	// earlier programs of a chain that is not attached (AddDetached):
	// their holders may still run them; closed with the chain
	retired []*ebpf.Program
}

// Add checks, compiles and attaches a chain. On any error nothing is
// left attached or written.
func (m *Manager) Add(spec ChainSpec) (*ChainStatus, error) {
	m.ops.Lock()
	defer m.ops.Unlock()
	if spec.Hook != Ingress && spec.Hook != Egress {
		return nil, fmt.Errorf("--hook %q is not valid (valid: ingress, egress)", spec.Hook)
	}
	prog, err := Compile(spec.Select, spec.Act, m.userNames())
	if err != nil {
		return nil, err
	}
	l, err := netlink.LinkByName(spec.Dev)
	if err != nil {
		return nil, fmt.Errorf("--dev %q: no such device in this network namespace", spec.Dev)
	}
	l2, err := l2len(l)
	if err != nil {
		return nil, err
	}
	if spec.ID == 0 {
		for id := uint32(1); id < MaxChains; id++ {
			if _, used := m.chains[id]; !used {
				spec.ID = id
				break
			}
		}
		if spec.ID == 0 {
			return nil, fmt.Errorf("all %d chains are in use", MaxChains-1)
		}
	} else if spec.ID >= MaxChains {
		return nil, fmt.Errorf("chain id %d is out of range (1 to %d)", spec.ID, MaxChains-1)
	} else if _, used := m.chains[spec.ID]; used {
		return nil, fmt.Errorf("chain %d exists already", spec.ID)
	}
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("this network namespace: %w", err)
	}
	c := &chain{spec: spec, prog: prog, ifindex: l.Attrs().Index, l2: l2, slot: spec.ID * 2, netns: ns.UniqueId()}
	ns.Close()
	var at place
	for _, ref := range []struct {
		id     uint32
		before bool
	}{{spec.Before, true}, {spec.After, false}} {
		if ref.id == 0 {
			continue
		}
		other, ok := m.chains[ref.id]
		if !ok || other.att == nil || hookOf(other) != hookOf(c) {
			return nil, fmt.Errorf("chain %d is not on %s %s: cannot place chain %d next to it", ref.id, spec.Dev, spec.Hook, spec.ID)
		}
		at = place{ref: other, before: ref.before}
	}
	if err := m.prepare(c, c.slot, prog); err != nil {
		return nil, err
	}
	if !m.pinned { // pinned counters carry on from the previous process
		m.resetStats(spec.ID)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c.att, err = m.attach(c, c.entry, at)
	if err != nil {
		m.unprepare(c, c.slot)
		return nil, fmt.Errorf("attach to %s %s: %w", spec.Dev, spec.Hook, err)
	}
	m.chains[spec.ID] = c
	return m.status(c), nil
}

// l2len is the length of the link-layer header in front of IP on dev.
func l2len(l netlink.Link) (uint32, error) {
	switch l.Attrs().EncapType {
	case "ether", "loopback":
		return 14, nil
	case "none", "": // TUN and other IP devices
		return 0, nil
	}
	return 0, fmt.Errorf("device %s has link type %q; chains run on Ethernet-like and IP (TUN) devices", l.Attrs().Name, l.Attrs().EncapType)
}

// prepare loads the program of chain c for descriptor slot `slot` (the
// verifier checks the whole chain) into c.entry, and writes what loaded
// actors read: the descriptor, and the program in mpsteer_resumes for
// them to come back to. Nothing the running chain uses is touched, and
// nothing List reads: it runs without m.mu.
func (m *Manager) prepare(c *chain, slot uint32, prog *Program) error {
	p, err := m.loadChain(c.spec.ID, slot, c.l2, prog, false)
	if err != nil {
		return err
	}
	if err := m.writeDescriptor(c.spec.ID, prog, slot, c.l2); err != nil {
		p.prog.Close()
		return err
	}
	if p.user {
		if err := m.objs.MpsteerResumes.Put(slot, p.prog); err != nil {
			p.prog.Close()
			return fmt.Errorf("resume array: %w", err)
		}
	} else {
		m.objs.MpsteerResumes.Delete(slot)
	}
	c.entry, c.cur = p.prog, p
	return nil
}

// unprepare undoes prepare after a failure.
func (m *Manager) unprepare(c *chain, slot uint32) {
	m.objs.MpsteerResumes.Delete(slot)
	if c.entry != nil {
		c.entry.Close()
		c.entry, c.cur = nil, nil
	}
}

// writeDescriptor writes the chain's descriptor: loaded actors read their
// arguments from it (mpsteer_this) and where to go next (mpsteer_next).
// Built-in steps are reached through mpsteer_resume.
func (m *Manager) writeDescriptor(id uint32, prog *Program, slot uint32, l2 uint32) error {
	var d stepsMpsteerChain
	d.Id, d.N, d.FirstActor, d.L2len = id, uint32(len(prog.Steps)), uint32(prog.FirstActor), l2
	for i, st := range prog.Steps {
		idx := uint32(resumeIndex)
		if name, user := strings.CutPrefix(st.Prog, "user:"); user {
			var ok bool
			if idx, ok = m.index["user:"+name]; !ok {
				return fmt.Errorf("step %q: program %s is not loaded", st.Text, st.Prog)
			}
		}
		d.Steps[i].Prog = uint16(idx)
		d.Steps[i].OnMatch, d.Steps[i].OnMiss, d.Steps[i].Flags = st.OnMatch, st.OnMiss, st.Flags
		d.Steps[i].Args = st.Args
	}
	return m.objs.MpsteerChains.Put(slot, &d)
}

// runtime is the kernel's count of the time spent in the chain so far.
func (c *chain) runtime() uint64 {
	if c.entry == nil {
		return c.runtimeBase
	}
	if ps, err := c.entry.Stats(); err == nil {
		return c.runtimeBase + uint64(ps.Runtime)
	}
	return c.runtimeBase
}

// retire takes the chain's current program out of service.
func (c *chain) retire() {
	if c.entry == nil {
		return
	}
	c.runtimeBase = c.runtime()
	if c.att == nil {
		c.retired = append(c.retired, c.entry)
	} else {
		c.entry.Close()
	}
	c.entry, c.cur = nil, nil
}

// Del detaches and forgets a chain.
func (m *Manager) Del(id uint32) error {
	m.ops.Lock()
	defer m.ops.Unlock()
	return m.del(id)
}

// del takes a chain off; with m.ops held.
func (m *Manager) del(id uint32) error {
	c, ok := m.chains[id]
	if !ok {
		return fmt.Errorf("no chain %d", id)
	}
	m.mu.Lock()
	err := m.detach(c)
	if err == nil {
		delete(m.chains, id)
	}
	m.mu.Unlock()
	if err != nil {
		// Inert (it runs no step) but still attached: keep it, so that
		// a retry or Close can take it off.
		return fmt.Errorf("detach chain %d from %s %s: %w", id, c.spec.Dev, c.spec.Hook, err)
	}
	// Forget its counters and what it withheld.
	m.resetStats(id)
	for slot := id * 2; slot < id*2+2; slot++ {
		m.objs.MpsteerResumes.Delete(slot)
	}
	m.forgetWithheld(id)
	return nil
}

// Replace swaps a chain's selectors and actors in place: the new chain is
// built and verified as a program of its own (for the chain's other
// descriptor slot), then replaces the old one in the chain's TCX link in
// one step (bpf_link_update), so each packet runs the old chain or the new
// one, never a mix. Counters, withheld options and the chain's place on
// the hook stay.
func (m *Manager) Replace(id uint32, selectExpr, actExpr string) (*ChainStatus, error) {
	m.ops.Lock()
	defer m.ops.Unlock()
	return m.replace(id, selectExpr, actExpr)
}

// replace builds the new chain without m.mu and swaps it in with it; with
// m.ops held.
func (m *Manager) replace(id uint32, selectExpr, actExpr string) (*ChainStatus, error) {
	c, ok := m.chains[id]
	if !ok {
		return nil, fmt.Errorf("no chain %d", id)
	}
	prog, err := Compile(selectExpr, actExpr, m.userNames())
	if err != nil {
		return nil, err
	}
	l2 := uint32(14)
	if c.ifindex != 0 {
		l, err := netlink.LinkByIndex(c.ifindex)
		if err != nil {
			return nil, err
		}
		if l2, err = l2len(l); err != nil {
			return nil, err
		}
	}
	next := c.slot ^ 1
	// The idle slot's step counters start from zero for the new chain.
	m.zeroStepCounts(next)
	nc := &chain{spec: c.spec, l2: l2}
	if err := m.prepare(nc, next, prog); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.att != nil {
		if err := c.att.update(nc.entry); err != nil {
			nc.entry.Close()
			return nil, fmt.Errorf("replace chain %d: %w", id, err)
		}
	}
	c.retire()
	c.entry, c.cur, c.l2, c.prog, c.slot = nc.entry, nc.cur, l2, prog, next
	c.spec.Select, c.spec.Act = selectExpr, actExpr
	return m.status(c), nil
}

// Move places a chain before or after another chain of its hook. A new
// instance of the chain's program is loaded and attached at the new place;
// while the two attachments swap, the chain is paused (packets pass
// untouched) rather than run twice.
func (m *Manager) Move(id, before, after uint32) (*ChainStatus, error) {
	m.ops.Lock()
	defer m.ops.Unlock()
	c, ok := m.chains[id]
	if !ok || c.att == nil {
		return nil, fmt.Errorf("no chain %d", id)
	}
	ref, place := before, "before"
	if ref == 0 {
		ref, place = after, "after"
	}
	other, ok := m.chains[ref]
	if !ok || ref == id || other.att == nil || hookOf(other) != hookOf(c) {
		return nil, fmt.Errorf("chain %d is not another chain on %s %s", ref, c.spec.Dev, c.spec.Hook)
	}
	at := placeAt(other, place == "before")
	// A program is attached at most once per hook: a second instance,
	// loaded (and verified) paused, before the chain pauses.
	np, err := m.loadChain(id, c.slot, c.l2, c.prog, true)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	attachNew := func(c *chain, p *ebpf.Program) (attachment, error) { return m.attachTCX(c, p, at) }
	if _, ok := c.att.(*clsactAttachment); ok {
		prio, err := m.clsactPrio(c, at) // may renumber the hook, c too
		if err != nil {
			np.prog.Close()
			return nil, err
		}
		attachNew = func(c *chain, p *ebpf.Program) (attachment, error) { return m.attachClsactAt(c, p, prio) }
		if prio == c.att.(*clsactAttachment).prio() { // there already
			np.prog.Close()
			attachNew = nil
		}
	}
	if attachNew != nil {
		if err := m.swapAttachment(c, np, attachNew); err != nil {
			return nil, fmt.Errorf("move chain %d %s %d: %w", id, place, ref, err)
		}
	}
	c.spec.Before, c.spec.After = before, after
	return m.status(c), nil
}

// AddDetached prepares a chain without attaching it to a device, for
// BPF_PROG_TEST_RUN: the returned entry program runs the chain on packets
// given to it (they start with an Ethernet header, l2len 14).
func (m *Manager) AddDetached(selectExpr, actExpr string) (uint32, *ebpf.Program, error) {
	m.ops.Lock()
	defer m.ops.Unlock()
	prog, err := Compile(selectExpr, actExpr, m.userNames())
	if err != nil {
		return 0, nil, err
	}
	var id uint32
	for i := uint32(1); i < MaxChains; i++ {
		if _, used := m.chains[i]; !used {
			id = i
			break
		}
	}
	if id == 0 {
		return 0, nil, errors.New("no free chain id")
	}
	c := &chain{spec: ChainSpec{ID: id, Dev: "(test run)", Hook: Ingress, Select: selectExpr, Act: actExpr}, prog: prog, l2: 14, slot: id * 2}
	if err := m.prepare(c, c.slot, prog); err != nil {
		return 0, nil, err
	}
	if !m.pinned {
		m.resetStats(id)
	}
	m.mu.Lock()
	m.chains[id] = c
	m.mu.Unlock()
	return id, c.entry, nil
}

// Program is a chain's current program, for BPF_PROG_TEST_RUN (tests and
// benchmarks); nil for no such chain. Replace and Move change it.
func (m *Manager) Program(id uint32) *ebpf.Program {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.chains[id]; ok {
		return c.entry
	}
	return nil
}
