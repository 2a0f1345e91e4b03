package corepin

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/netnsutil"
)

// MaxLinks is the most core links (link ids 0…MaxLinks-1).
const MaxLinks = 256

// MaxPerPair is the most links one pair may have.
const MaxPerPair = 16

// Pair is one (client address, server address) pair and its links, by id
// in the order the round-robin takes them.
type Pair struct {
	Client, Server netip.Addr
	Links          []uint32
}

// Pinner is the loaded program and its maps. Its TCX links live as long as
// the Pinner (its process): closing it, or the process ending, detaches
// the program everywhere.
type Pinner struct {
	mu    sync.Mutex
	objs  corepinObjects
	links []link.Link
}

// LinkStats is what the program counted for one link.
type LinkStats struct {
	// Flows is how many TCP flows were pinned to the link.
	Flows uint64 `json:"flows"`
	// Fwd and Rev count the packets marked for it at r1 (client → server)
	// and at r2 (server → client).
	Fwd   uint64 `json:"fwd_packets"`
	Rev   uint64 `json:"rev_packets"`
	Alive bool   `json:"alive"`
}

// Load loads the program with the pairs it pins for; every link of a pair
// starts alive. Link id n is marked markBase+n.
func Load(pairs []Pair, markBase uint32) (*Pinner, error) {
	spec, err := loadCorepin()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["mark_base"].Set(markBase); err != nil {
		return nil, err
	}
	p := &Pinner{}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load the core pinning program: %w", bpfutil.VerifierDetail(err))
	}
	for _, pr := range pairs {
		if len(pr.Links) == 0 || len(pr.Links) > MaxPerPair {
			p.Close()
			return nil, fmt.Errorf("pair %s→%s has %d links (1 to %d)", pr.Client, pr.Server, len(pr.Links), MaxPerPair)
		}
		v := corepinPairVal{N: uint32(len(pr.Links))}
		for i, l := range pr.Links {
			if l >= MaxLinks {
				p.Close()
				return nil, fmt.Errorf("link id %d is out of range (0 to %d)", l, MaxLinks-1)
			}
			v.Links[i] = l
			if err := p.objs.Alive.Put(l, uint32(1)); err != nil {
				p.Close()
				return nil, err
			}
		}
		k := corepinPairKey{Client: be32(pr.Client), Server: be32(pr.Server)}
		if err := p.objs.Pairs.Put(&k, &v); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// be32 is an IPv4 address as the program reads it from a packet: the
// bytes in network order, in a native-endian u32.
func be32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// Attach attaches the program at TCX ingress of device dev in network
// namespace ns.
func (p *Pinner) Attach(ns, dev string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, err := netnsutil.Netlink(ns)
	if err != nil {
		return err
	}
	l, err := h.LinkByName(dev)
	h.Close()
	if err != nil {
		return fmt.Errorf("device %s in %s: %w", dev, ns, err)
	}
	// The kernel resolves the index in the calling thread's namespace.
	return netnsutil.Do(ns, func() error {
		tl, err := link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: p.objs.Corepin, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return fmt.Errorf("attach the core pinning program to %s in %s: %w", dev, ns, err)
		}
		p.links = append(p.links, tl)
		return nil
	})
}

// SetAlive tells the program whether a link is up: new flows skip dead
// links; flows already pinned to one stay there.
func (p *Pinner) SetAlive(id uint32, up bool) error {
	v := uint32(0)
	if up {
		v = 1
	}
	return p.objs.Alive.Put(id, v)
}

// Stats returns the counters of a link.
func (p *Pinner) Stats(id uint32) (LinkStats, error) {
	var st corepinLinkStats
	if err := p.objs.Stats.Lookup(id, &st); err != nil {
		return LinkStats{}, err
	}
	var a uint32
	if err := p.objs.Alive.Lookup(id, &a); err != nil {
		return LinkStats{}, err
	}
	return LinkStats{Flows: st.Flows, Fwd: st.Fwd, Rev: st.Rev, Alive: a != 0}, nil
}

// Counters returns packets left to ECMP: "no_live_link" (a new flow found
// every link of its pair dead) and "unpinned_reverse" (a server → client
// packet of a flow the program never saw).
func (p *Pinner) Counters() map[string]uint64 {
	out := map[string]uint64{}
	for i, name := range []string{"no_live_link", "unpinned_reverse"} {
		var v uint64
		if err := p.objs.Counters.Lookup(uint32(i), &v); err == nil {
			out[name] = v
		}
	}
	return out
}

// Close detaches the program everywhere and unloads it.
func (p *Pinner) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs error
	for _, l := range p.links {
		errs = errors.Join(errs, l.Close())
	}
	p.links = nil
	return errors.Join(errs, p.objs.Close())
}
