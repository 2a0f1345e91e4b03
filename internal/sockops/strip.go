package sockops

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/netnsutil"
)

// Stripper blanks the path-health option (turns it into NOPs, checksum
// fixed) in the TCP packets that pass a device, as a middlebox that strips
// options it does not know would: the tests' stand-in for one
// (bpf/healthtest.bpf.c, ht_strip).
type Stripper struct {
	objs  healthtestObjects
	links []link.Link
}

// NewStripper loads the program; l3 is for devices without an Ethernet
// header (the lab's TUN links).
func NewStripper(l3 bool) (*Stripper, error) {
	spec, err := loadHealthtest()
	if err != nil {
		return nil, err
	}
	off := uint32(14)
	if l3 {
		off = 0
	}
	if err := spec.Variables["nh_off"].Set(off); err != nil {
		return nil, err
	}
	s := &Stripper{}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("load the option stripper: %w", bpfutil.VerifierDetail(err))
	}
	return s, nil
}

// Attach strips the option from packets arriving at (or, egress, leaving)
// device dev of network namespace ns.
func (s *Stripper) Attach(ns, dev string, egress bool) error {
	h, err := netnsutil.Netlink(ns)
	if err != nil {
		return err
	}
	l, err := h.LinkByName(dev)
	h.Close()
	if err != nil {
		return fmt.Errorf("device %s in %s: %w", dev, ns, err)
	}
	at := ebpf.AttachTCXIngress
	if egress {
		at = ebpf.AttachTCXEgress
	}
	return netnsutil.Do(ns, func() error {
		tl, err := link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: s.objs.HtStrip, Attach: at})
		if err != nil {
			return fmt.Errorf("attach the option stripper to %s in %s: %w", dev, ns, err)
		}
		s.links = append(s.links, tl)
		return nil
	})
}

// Stats counts the packets stripped and those that had the option in a
// shape it leaves alone.
func (s *Stripper) Stats() (stripped, left uint64) {
	_ = s.objs.HtStripStats.Lookup(uint32(0), &stripped)
	_ = s.objs.HtStripStats.Lookup(uint32(1), &left)
	return
}

// Close detaches and unloads.
func (s *Stripper) Close() error {
	var errs error
	for _, l := range s.links {
		errs = errors.Join(errs, l.Close())
	}
	return errors.Join(errs, s.objs.Close())
}
