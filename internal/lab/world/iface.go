package world

import (
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"
)

// SetInterface takes a path's client interface down or brings it back: the
// other kind of outage a phone sees, where the radio loses its carrier and
// the interface its address (the silent kind, `down`, only blackholes the
// link and the host notices nothing). Down: the link goes dark, the
// client's device goes down and loses its address (and with it its
// routes). Up: the link comes back, then the device, its address and its
// routes, as a carrier returning and an address being assigned would; the
// time of the link's return is the emulator's link-up record, as for the
// silent kind.
func (w *World) SetInterface(path string, up bool) (string, error) {
	p := w.Path(path)
	if p == nil {
		return "", fmt.Errorf("no path %q", path)
	}
	if p.Link == "" {
		return "", fmt.Errorf("path %s is via core without link parameters: its access link is a plain veth with no interface of the client's to take down", p.Name)
	}
	client := w.ClientRole()
	var end *End
	for i := range w.Links {
		l := &w.Links[i]
		if l.Name != p.Link {
			continue
		}
		for _, e := range []*End{&l.A, &l.B} {
			if e.Host == client && e.Dev == p.Client.Dev {
				end = e
			}
		}
	}
	if end == nil || !end.Addr.IsValid() {
		return "", fmt.Errorf("path %s: the client's device %s is not an end of link %s", p.Name, p.Client.Dev, p.Link)
	}
	h, err := w.nl(client)
	if err != nil {
		return "", err
	}
	defer h.Close()
	l, err := h.LinkByName(end.Dev)
	if err != nil {
		return "", fmt.Errorf("host %s: device %s: %w", client, end.Dev, err)
	}
	addr := &netlink.Addr{IPNet: toIPNet(end.Addr)}
	if !up {
		if _, err := Control(w.Dir, Request{Op: "down", Link: p.Link}); err != nil {
			return "", err
		}
		if err := h.LinkSetDown(l); err != nil {
			return "", fmt.Errorf("host %s: %s down: %w", client, end.Dev, err)
		}
		if err := h.AddrDel(l, addr); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return "", fmt.Errorf("host %s: %s: remove address %s: %w", client, end.Dev, end.Addr, err)
		}
		return fmt.Sprintf("link down, %s down, address %s removed", end.Dev, end.Addr), nil
	}
	if _, err := Control(w.Dir, Request{Op: "up", Link: p.Link}); err != nil {
		return "", err
	}
	if err := h.LinkSetUp(l); err != nil {
		return "", fmt.Errorf("host %s: %s up: %w", client, end.Dev, err)
	}
	if err := h.AddrReplace(l, addr); err != nil {
		return "", fmt.Errorf("host %s: %s: address %s: %w", client, end.Dev, end.Addr, err)
	}
	n := 0
	for _, rt := range w.Routes {
		if rt.Host != client || !slices.Contains(rt.Devs, end.Dev) {
			continue
		}
		if err := addRoute(h, rt, true); err != nil {
			return "", err
		}
		n++
	}
	return fmt.Sprintf("link up, %s up, address %s and %d route(s) back", end.Dev, end.Addr, n), nil
}
