package datapath

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// AttachMode says how chains are attached to their hooks.
type AttachMode string

const (
	// AttachAuto: TCX where the kernel has it (6.6 on), otherwise a tc
	// clsact filter. Which one is found once, at the first attachment.
	AttachAuto AttachMode = ""
	// AttachTCX: TCX links only.
	AttachTCX AttachMode = "tcx"
	// AttachClsact: a BPF filter in direct-action mode on the device's
	// clsact qdisc (what kernels before 6.6 have), even where TCX is
	// there (tests run this path on any kernel).
	AttachClsact AttachMode = "clsact"
)

// AttachEnv, set to tcx or clsact, chooses the attachment of managers
// whose Options leave it to AttachAuto (the daemon's, the tests').
const AttachEnv = "MPSTEER_CHAIN_ATTACH"

func attachModeFrom(o Options) (AttachMode, error) {
	mode := o.Attach
	if mode == AttachAuto {
		mode = AttachMode(os.Getenv(AttachEnv))
	}
	switch mode {
	case AttachAuto, AttachTCX, AttachClsact:
		return mode, nil
	}
	return "", fmt.Errorf("chain attachment %q is not valid (valid: tcx, clsact; %s or Options.Attach)", mode, AttachEnv)
}

// attachment is how a chain's program sits on its hook.
type attachment interface {
	// update swaps the program in, atomically: each packet runs the old
	// program or the new one.
	update(prog *ebpf.Program) error
	// detach takes the program off the hook.
	detach() error
}

// tcxAttachment is a TCX link: the kernel orders the chains of a hook
// (anchors), and the link goes with the process (fail open).
type tcxAttachment struct{ l link.Link }

func (a *tcxAttachment) update(p *ebpf.Program) error { return a.l.Update(p) }
func (a *tcxAttachment) detach() error                { return a.l.Close() }

// place is where a chain goes on its hook: next to ref (before or after
// it), or last (ref nil).
type place struct {
	ref    *chain
	before bool
}

func placeAt(ref *chain, before bool) place { return place{ref: ref, before: before} }

// hookOf names a chain's hook: network namespace, device, direction.
func hookOf(c *chain) string {
	return fmt.Sprintf("%s/%d/%s", c.netns, c.ifindex, c.spec.Hook)
}

// attach puts prog on c's hook at place at, with the manager's mechanism;
// the first attachment of an AttachAuto manager finds out whether the
// kernel has TCX. With m.mu held.
func (m *Manager) attach(c *chain, prog *ebpf.Program, at place) (attachment, error) {
	if m.mode != AttachClsact {
		a, err := m.attachTCX(c, prog, at)
		if err == nil {
			m.mode = AttachTCX
			return a, nil
		}
		if m.mode == AttachTCX || !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, err
		}
		m.mode = AttachClsact // no TCX here: tc from now on
	}
	if err := m.holdLease(); err != nil {
		return nil, err
	}
	return m.attachClsact(c, prog, at)
}

func (m *Manager) attachTCX(c *chain, prog *ebpf.Program, at place) (attachment, error) {
	anchor := link.Tail()
	if at.ref != nil {
		ref, ok := at.ref.att.(*tcxAttachment)
		if !ok {
			return nil, fmt.Errorf("chain %d is not attached with TCX", at.ref.spec.ID)
		}
		if at.before {
			anchor = link.BeforeLink(ref.l)
		} else {
			anchor = link.AfterLink(ref.l)
		}
	}
	attach := ebpf.AttachTCXIngress
	if c.spec.Hook == Egress {
		attach = ebpf.AttachTCXEgress
	}
	attachTCX := link.AttachTCX
	if m.tcxHook != nil {
		attachTCX = m.tcxHook
	}
	l, err := attachTCX(link.TCXOptions{Interface: c.ifindex, Program: prog, Attach: attach, Anchor: anchor})
	if err != nil {
		return nil, err
	}
	return &tcxAttachment{l}, nil
}

// reattach moves chain c to a new attachment made by attachNew: a second
// instance of its program, loaded paused, is attached there; the chain
// pauses (packets pass it untouched rather than run it twice), the old
// attachment goes, the new instance runs. With m.mu held; the load (the
// verifier) runs under it, which only moves (rare) and renumbering do.
func (m *Manager) reattach(c *chain, attachNew func(*chain, *ebpf.Program) (attachment, error)) error {
	np, err := m.loadChain(c.spec.ID, c.slot, c.l2, c.prog, true)
	if err != nil {
		return err
	}
	return m.swapAttachment(c, np, attachNew)
}

// swapAttachment is reattach with the new instance loaded.
func (m *Manager) swapAttachment(c *chain, np *chainProg, attachNew func(*chain, *ebpf.Program) (attachment, error)) error {
	if err := c.cur.pause(true); err != nil {
		np.prog.Close()
		return err
	}
	na, err := attachNew(c, np.prog)
	if err != nil {
		np.prog.Close()
		c.cur.pause(false)
		return err
	}
	c.att.detach()
	c.att = na
	c.retire()
	c.entry, c.cur = np.prog, np
	if np.user {
		m.objs.MpsteerResumes.Put(c.slot, np.prog)
	}
	return np.pause(false)
}

// detach makes a chain inert, takes it off its device and unloads its
// program; it can be called again after a failure.
func (m *Manager) detach(c *chain) error {
	if c.cur != nil {
		c.cur.pause(true)
	}
	if c.att != nil {
		if err := c.att.detach(); err != nil {
			return err
		}
		c.att = nil
	}
	if c.entry != nil {
		c.entry.Close()
		c.entry, c.cur = nil, nil
	}
	for _, p := range c.retired {
		p.Close()
	}
	c.retired = nil
	return nil
}

// mechanism names how a chain is attached, for its status.
func (c *chain) mechanism() (string, uint16) {
	switch a := c.att.(type) {
	case *tcxAttachment:
		return "tcx", 0
	case *clsactAttachment:
		return "tc clsact", a.prio()
	}
	return "", 0
}
