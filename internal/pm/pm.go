// Package pm is a client for the kernel's MPTCP path-manager generic netlink
// family ("mptcp_pm"): endpoints, limits, per-subflow flags, the userspace
// path manager's announce/remove/subflow commands, and the event group.
//
// No Go library covers this family, so it is written here on
// mdlayher/genetlink, following Documentation/netlink/specs/mptcp_pm.yaml.
// Values cross this API in their natural Go forms: addresses as netip.Addr
// and ports in host byte order; the wire encoding of each attribute
// (host-order ports in commands, big-endian ports in events) stays inside.
package pm

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"mpsteer/internal/netnsutil"
)

// FamilyName and EventGroup are the kernel's names for the family and its
// multicast group.
const (
	FamilyName = "mptcp_pm"
	EventGroup = "mptcp_pm_events"
)

// Commands (enum mptcp_pm_cmd).
const (
	cmdAddAddr        = 1
	cmdDelAddr        = 2
	cmdGetAddr        = 3
	cmdFlushAddrs     = 4
	cmdSetLimits      = 5
	cmdGetLimits      = 6
	cmdSetFlags       = 7
	cmdAnnounce       = 8
	cmdRemove         = 9
	cmdSubflowCreate  = 10
	cmdSubflowDestroy = 11
)

var cmdNames = map[uint8]string{
	cmdAddAddr: "add-addr", cmdDelAddr: "del-addr", cmdGetAddr: "get-addr",
	cmdFlushAddrs: "flush-addrs", cmdSetLimits: "set-limits", cmdGetLimits: "get-limits",
	cmdSetFlags: "set-flags", cmdAnnounce: "announce", cmdRemove: "remove",
	cmdSubflowCreate: "subflow-create", cmdSubflowDestroy: "subflow-destroy",
}

// Top-level attributes (enum mptcp_pm_attr).
const (
	attrAddr         = 1
	attrRcvAddAddrs  = 2
	attrSubflows     = 3
	attrToken        = 4
	attrLocID        = 5
	attrAddrRemote   = 6
	addrAttrFamily   = 1
	addrAttrID       = 2
	addrAttrAddr4    = 3
	addrAttrAddr6    = 4
	addrAttrPort     = 5
	addrAttrFlags    = 6
	addrAttrIfIdx    = 7
	afInet           = unix.AF_INET
	afInet6          = unix.AF_INET6
	nlmFlagsDoAck    = netlink.Request | netlink.Acknowledge
	nlmFlagsDoGet    = netlink.Request // replies carry data instead of an ack
	nlmFlagsDumpReq  = netlink.Request | netlink.Dump
	maxEndpointFlags = FlagSignal | FlagSubflow | FlagBackup | FlagFullmesh | FlagImplicit | FlagLaminar
)

// Flags are endpoint flags (MPTCP_PM_ADDR_FLAG_*).
type Flags uint32

const (
	FlagSignal   Flags = 1 << 0
	FlagSubflow  Flags = 1 << 1
	FlagBackup   Flags = 1 << 2
	FlagFullmesh Flags = 1 << 3
	FlagImplicit Flags = 1 << 4
	FlagLaminar  Flags = 1 << 5
)

var flagNames = []struct {
	f    Flags
	name string
}{{FlagSignal, "signal"}, {FlagSubflow, "subflow"}, {FlagBackup, "backup"}, {FlagFullmesh, "fullmesh"}, {FlagImplicit, "implicit"}, {FlagLaminar, "laminar"}}

func (f Flags) String() string {
	var parts []string
	for _, n := range flagNames {
		if f&n.f != 0 {
			parts = append(parts, n.name)
			f &^= n.f
		}
	}
	if f != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint32(f)))
	}
	return strings.Join(parts, ",")
}

// ParseFlags reads a comma-separated list such as "subflow,backup".
func ParseFlags(s string) (Flags, error) {
	var f Flags
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		found := false
		for _, n := range flagNames {
			if n.name == p {
				f |= n.f
				found = true
			}
		}
		if !found {
			var valid []string
			for _, n := range flagNames {
				valid = append(valid, n.name)
			}
			return 0, fmt.Errorf("unknown endpoint flag %q (valid: %s)", p, strings.Join(valid, ", "))
		}
	}
	return f, nil
}

// Endpoint is one path-manager address entry.
type Endpoint struct {
	ID      uint8
	Addr    netip.Addr
	Port    uint16 // host byte order; 0 = any
	Flags   Flags
	IfIndex int32
}

func (e Endpoint) String() string {
	s := fmt.Sprintf("id %d %s", e.ID, e.Addr)
	if e.Port != 0 {
		s += fmt.Sprintf(" port %d", e.Port)
	}
	if e.Flags != 0 {
		s += " " + e.Flags.String()
	}
	if e.IfIndex != 0 {
		s += fmt.Sprintf(" ifindex %d", e.IfIndex)
	}
	return s
}

// Limits bound what the in-kernel path manager does per connection.
type Limits struct {
	AddAddrAccepted uint32 // ADD_ADDRs accepted from the peer
	Subflows        uint32 // additional subflows
}

// Client talks to the mptcp_pm family in one network namespace.
type Client struct {
	c   *genetlink.Conn
	fam genetlink.Family
}

// Options choose the network namespace; zero value = the caller's.
type Options struct {
	// NetNS is an open file descriptor of a network namespace (0 = current).
	NetNS int
	// NetNSName names a namespace under /run/netns instead (ip netns);
	// it is opened for the dial only.
	NetNSName string
}

// netlinkConfig resolves the namespace; done releases what it opened
// (the socket keeps its namespace once made).
func (o Options) netlinkConfig() (cfg *netlink.Config, done func(), err error) {
	if o.NetNSName == "" {
		return &netlink.Config{NetNS: o.NetNS}, func() {}, nil
	}
	h, err := netnsutil.Open(o.NetNSName)
	if err != nil {
		return nil, nil, err
	}
	return &netlink.Config{NetNS: int(h)}, func() { h.Close() }, nil
}

// ErrNoMPTCP means the kernel has no mptcp_pm family (no MPTCP support).
var ErrNoMPTCP = errors.New("the kernel has no MPTCP path manager (mptcp_pm generic netlink family not found; is CONFIG_MPTCP enabled?)")

// Dial opens a client.
func Dial(o Options) (*Client, error) {
	cfg, done, err := o.netlinkConfig()
	if err != nil {
		return nil, fmt.Errorf("mptcp_pm: %w", err)
	}
	c, err := genetlink.Dial(cfg)
	done()
	if err != nil {
		return nil, fmt.Errorf("mptcp_pm: open generic netlink: %w", err)
	}
	// Extended acks carry the kernel's explanation ("missing address info", …).
	_ = c.SetOption(netlink.ExtendedAcknowledge, true)
	fam, err := c.GetFamily(FamilyName)
	if err != nil {
		c.Close()
		if errors.Is(err, unix.ENOENT) {
			return nil, ErrNoMPTCP
		}
		return nil, fmt.Errorf("mptcp_pm: resolve family: %w", err)
	}
	return &Client{c: c, fam: fam}, nil
}

// Close releases the socket.
func (c *Client) Close() error { return c.c.Close() }

// Family describes the resolved family (version, groups).
func (c *Client) Family() genetlink.Family { return c.fam }

func (c *Client) exec(cmd uint8, flags netlink.HeaderFlags, enc func(ae *netlink.AttributeEncoder)) ([]genetlink.Message, error) {
	ae := netlink.NewAttributeEncoder()
	if enc != nil {
		enc(ae)
	}
	data, err := ae.Encode()
	if err != nil {
		return nil, fmt.Errorf("mptcp_pm %s: encode: %w", cmdNames[cmd], err)
	}
	msgs, err := c.c.Execute(genetlink.Message{
		Header: genetlink.Header{Command: cmd, Version: c.fam.Version},
		Data:   data,
	}, c.fam.ID, flags)
	if err != nil {
		return nil, wrapErr(cmdNames[cmd], err)
	}
	return msgs, nil
}

// wrapErr puts the kernel's extack message into the error text while
// keeping the errno reachable through errors.Is.
func wrapErr(op string, err error) error {
	var oe *netlink.OpError
	if errors.As(err, &oe) && oe.Message != "" {
		return fmt.Errorf("mptcp_pm %s: %s: %w", op, oe.Message, oe.Err)
	}
	if errors.As(err, &oe) {
		return fmt.Errorf("mptcp_pm %s: %w", op, oe.Err)
	}
	return fmt.Errorf("mptcp_pm %s: %w", op, err)
}

// encodeAddr writes an address nest. Only the fields that are set are sent,
// so the same helper serves "by id" and "by address" lookups.
func encodeAddr(ae *netlink.AttributeEncoder, typ uint16, e Endpoint, withFlags bool) {
	ae.Nested(typ, func(n *netlink.AttributeEncoder) error {
		if e.Addr.IsValid() {
			if e.Addr.Is4() {
				n.Uint16(addrAttrFamily, afInet)
				a := e.Addr.As4()
				n.Bytes(addrAttrAddr4, a[:])
			} else {
				n.Uint16(addrAttrFamily, afInet6)
				a := e.Addr.As16()
				n.Bytes(addrAttrAddr6, a[:])
			}
		}
		if e.ID != 0 {
			n.Uint8(addrAttrID, e.ID)
		}
		if e.Port != 0 {
			n.Uint16(addrAttrPort, e.Port)
		}
		if withFlags {
			n.Uint32(addrAttrFlags, uint32(e.Flags))
		}
		if e.IfIndex != 0 {
			n.Int32(addrAttrIfIdx, e.IfIndex)
		}
		return nil
	})
}

func decodeAddr(b []byte) (Endpoint, error) {
	var e Endpoint
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return e, err
	}
	for ad.Next() {
		switch ad.Type() {
		case addrAttrID:
			e.ID = ad.Uint8()
		case addrAttrAddr4:
			if b := ad.Bytes(); len(b) == 4 {
				e.Addr = netip.AddrFrom4([4]byte(b))
			}
		case addrAttrAddr6:
			if b := ad.Bytes(); len(b) == 16 {
				e.Addr = netip.AddrFrom16([16]byte(b))
			}
		case addrAttrPort:
			e.Port = ad.Uint16()
		case addrAttrFlags:
			e.Flags = Flags(ad.Uint32())
		case addrAttrIfIdx:
			e.IfIndex = ad.Int32()
		}
	}
	return e, ad.Err()
}

func decodeEndpoints(msgs []genetlink.Message) ([]Endpoint, error) {
	var out []Endpoint
	for _, m := range msgs {
		ad, err := netlink.NewAttributeDecoder(m.Data)
		if err != nil {
			return nil, err
		}
		for ad.Next() {
			if ad.Type() == attrAddr {
				e, err := decodeAddr(ad.Bytes())
				if err != nil {
					return nil, err
				}
				out = append(out, e)
			}
		}
		if err := ad.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AddEndpoint adds an endpoint and returns it as the kernel stored it (with
// its id). An id of 0 lets the kernel choose.
func (c *Client) AddEndpoint(e Endpoint) (Endpoint, error) {
	if e.Flags&^maxEndpointFlags != 0 {
		return e, fmt.Errorf("mptcp_pm add-addr: unknown flag bits 0x%x", uint32(e.Flags&^maxEndpointFlags))
	}
	if !e.Addr.IsValid() {
		return e, errors.New("mptcp_pm add-addr: an endpoint needs an address")
	}
	if _, err := c.exec(cmdAddAddr, nlmFlagsDoAck, func(ae *netlink.AttributeEncoder) { encodeAddr(ae, attrAddr, e, true) }); err != nil {
		return e, err
	}
	eps, err := c.Endpoints()
	if err != nil {
		return e, err
	}
	for _, got := range eps {
		if got.Addr == e.Addr && got.Port == e.Port {
			return got, nil
		}
	}
	return e, fmt.Errorf("mptcp_pm add-addr: endpoint %s was accepted but is not listed", e.Addr)
}

// DelEndpoint removes the endpoint with this id. Id 0 (the initial
// subflow's address) is addressed by its address instead, as the kernel
// requires.
func (c *Client) DelEndpoint(e Endpoint) error {
	_, err := c.exec(cmdDelAddr, nlmFlagsDoAck, func(ae *netlink.AttributeEncoder) {
		encodeAddr(ae, attrAddr, Endpoint{ID: e.ID, Addr: onlyIfNoID(e)}, false)
	})
	return err
}

func onlyIfNoID(e Endpoint) netip.Addr {
	if e.ID == 0 {
		return e.Addr
	}
	return netip.Addr{}
}

// GetEndpoint returns the endpoint with this id.
func (c *Client) GetEndpoint(id uint8) (Endpoint, error) {
	msgs, err := c.exec(cmdGetAddr, nlmFlagsDoGet, func(ae *netlink.AttributeEncoder) {
		encodeAddr(ae, attrAddr, Endpoint{ID: id}, false)
	})
	if err != nil {
		return Endpoint{}, err
	}
	eps, err := decodeEndpoints(msgs)
	if err != nil || len(eps) == 0 {
		return Endpoint{}, fmt.Errorf("mptcp_pm get-addr %d: no endpoint in reply (%v)", id, err)
	}
	return eps[0], nil
}

// Endpoints dumps all endpoints.
func (c *Client) Endpoints() ([]Endpoint, error) {
	msgs, err := c.exec(cmdGetAddr, nlmFlagsDumpReq, nil)
	if err != nil {
		return nil, err
	}
	return decodeEndpoints(msgs)
}

// FlushEndpoints removes every endpoint.
func (c *Client) FlushEndpoints() error {
	_, err := c.exec(cmdFlushAddrs, nlmFlagsDoAck, nil)
	return err
}

// SetLimits sets the in-kernel path manager's limits.
func (c *Client) SetLimits(l Limits) error {
	_, err := c.exec(cmdSetLimits, nlmFlagsDoAck, func(ae *netlink.AttributeEncoder) {
		ae.Uint32(attrRcvAddAddrs, l.AddAddrAccepted)
		ae.Uint32(attrSubflows, l.Subflows)
	})
	return err
}

// Limits reads the limits.
func (c *Client) Limits() (Limits, error) {
	msgs, err := c.exec(cmdGetLimits, nlmFlagsDoGet, nil)
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	for _, m := range msgs {
		ad, err := netlink.NewAttributeDecoder(m.Data)
		if err != nil {
			return l, err
		}
		for ad.Next() {
			switch ad.Type() {
			case attrRcvAddAddrs:
				l.AddAddrAccepted = ad.Uint32()
			case attrSubflows:
				l.Subflows = ad.Uint32()
			}
		}
		if err := ad.Err(); err != nil {
			return l, err
		}
	}
	return l, nil
}

// SetEndpointFlags changes the flags of an endpoint (by id, or by address
// when id is 0). Changing backup sends MP_PRIO on the subflows using it.
func (c *Client) SetEndpointFlags(e Endpoint) error {
	_, err := c.exec(cmdSetFlags, nlmFlagsDoAck, func(ae *netlink.AttributeEncoder) {
		encodeAddr(ae, attrAddr, Endpoint{ID: e.ID, Addr: onlyIfNoID(e), Flags: e.Flags}, true)
	})
	return err
}

// SetSubflowFlags changes the flags (backup) of one subflow of the
// connection with this token, named by its local and remote address and
// port.
func (c *Client) SetSubflowFlags(token uint32, local, remote netip.AddrPort, flags Flags) error {
	_, err := c.exec(cmdSetFlags, nlmFlagsDoAck, func(ae *netlink.AttributeEncoder) {
		ae.Uint32(attrToken, token)
		encodeAddr(ae, attrAddr, Endpoint{Addr: local.Addr(), Port: local.Port(), Flags: flags}, true)
		encodeAddr(ae, attrAddrRemote, Endpoint{Addr: remote.Addr(), Port: remote.Port()}, false)
	})
	return err
}

// Announce makes the userspace path manager send ADD_ADDR for e on the
// connection with this token (the kernel wants the signal flag on it).
func (c *Client) Announce(token uint32, e Endpoint) error {
	e.Flags |= FlagSignal
	_, err := c.exec(cmdAnnounce, nlmFlagsDoAck, func(ae *netlink.AttributeEncoder) {
		ae.Uint32(attrToken, token)
		encodeAddr(ae, attrAddr, e, true)
	})
	return err
}

// Remove makes the userspace path manager send REMOVE_ADDR for a local id.
func (c *Client) Remove(token uint32, localID uint8) error {
	_, err := c.exec(cmdRemove, nlmFlagsDoAck, func(ae *netlink.AttributeEncoder) {
		ae.Uint32(attrToken, token)
		ae.Uint8(attrLocID, localID)
	})
	return err
}

// SubflowCreate asks the userspace path manager to open a subflow from
// local (id, address, optional port and interface) to remote.
func (c *Client) SubflowCreate(token uint32, local Endpoint, remote netip.AddrPort) error {
	_, err := c.exec(cmdSubflowCreate, nlmFlagsDoAck, func(ae *netlink.AttributeEncoder) {
		ae.Uint32(attrToken, token)
		encodeAddr(ae, attrAddr, local, local.Flags != 0)
		encodeAddr(ae, attrAddrRemote, Endpoint{Addr: remote.Addr(), Port: remote.Port()}, false)
	})
	return err
}

// SubflowDestroy closes the subflow with these addresses and ports.
func (c *Client) SubflowDestroy(token uint32, local, remote netip.AddrPort) error {
	_, err := c.exec(cmdSubflowDestroy, nlmFlagsDoAck, func(ae *netlink.AttributeEncoder) {
		ae.Uint32(attrToken, token)
		encodeAddr(ae, attrAddr, Endpoint{Addr: local.Addr(), Port: local.Port()}, false)
		encodeAddr(ae, attrAddrRemote, Endpoint{Addr: remote.Addr(), Port: remote.Port()}, false)
	})
	return err
}
