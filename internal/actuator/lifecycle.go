package actuator

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// Lifecycle takes the actions other than backup flags: create and
// destroy subflows, announce and withdraw addresses. Under the userspace
// path manager it sends the mptcp_pm commands for them; under the kernel
// path manager they are not possible (the kernel opens subflows from its
// endpoints itself), and each is reported as unsupported.
type Lifecycle struct {
	c    PM
	mode string
	// ids are the local address ids in use per connection: the userspace
	// path manager wants one id per local address (and port) on a
	// connection, the same for announcing and for opening subflows.
	ids map[uint32]*localIDs
}

type localIDs struct {
	byAddr map[netip.AddrPort]uint8
	used   [256]bool
}

// NewLifecycle takes lifecycle actions under the path manager mode
// (policy.KernelPM or policy.UserspacePM).
func NewLifecycle(c PM, mode string) *Lifecycle {
	return &Lifecycle{c: c, mode: mode, ids: map[uint32]*localIDs{}}
}

// SetMode follows the namespace's path manager when it is switched.
func (a *Lifecycle) SetMode(mode string) { a.mode = mode }

// unsupportedWhy explains why the kernel path manager cannot take an action.
func unsupportedWhy(k policy.Kind) string {
	return fmt.Sprintf("the kernel path manager runs this namespace and takes no %s commands (it opens subflows and announces addresses from its endpoints); set %s here to let mpsteer do it", k, netnsutil.UserspacePMSetting())
}

// Apply takes the actions in order. conns gives, per connection, its
// subflows as last seen (their local ids seed the id map) and its own
// local address (id 0).
func (a *Lifecycle) Apply(acts []policy.Action, conns map[uint32]*policy.Conn, now time.Time) []policy.Outcome {
	var out []policy.Outcome
	for _, act := range acts {
		o := policy.Outcome{Action: act, At: now, Result: policy.Applied}
		if a.mode != policy.UserspacePM {
			o.Result, o.Error = policy.Unsupported, unsupportedWhy(act.Kind)
			out = append(out, o)
			continue
		}
		if err := a.apply(act, conns[act.Token]); err != nil {
			o.Result, o.Error = policy.Refused, err.Error()
		}
		out = append(out, o)
	}
	return out
}

func (a *Lifecycle) apply(act policy.Action, c *policy.Conn) error {
	switch act.Kind {
	case policy.Create:
		local := pm.Endpoint{Addr: act.Subflow.Local.Addr(), Port: act.Subflow.Local.Port()}
		if act.Backup {
			local.Flags |= pm.FlagBackup // the join asks the peer to hold it in reserve
		}
		if act.Iface != "" {
			ifi, err := net.InterfaceByName(act.Iface)
			if err != nil {
				return fmt.Errorf("interface %s: %w", act.Iface, err)
			}
			local.IfIndex = int32(ifi.Index)
		}
		return a.withID(act.Token, c, act.Subflow.Local.AddrPort(), func(id uint8) error {
			local.ID = id
			return a.c.SubflowCreate(act.Token, local, act.Subflow.Remote.AddrPort())
		})
	case policy.Destroy:
		return a.c.SubflowDestroy(act.Token, act.Subflow.Local.AddrPort(), act.Subflow.Remote.AddrPort())
	case policy.Announce:
		return a.withID(act.Token, c, act.Addr, func(id uint8) error {
			return a.c.Announce(act.Token, pm.Endpoint{ID: id, Addr: act.Addr.Addr(), Port: act.Addr.Port()})
		})
	case policy.Withdraw:
		ids := a.idsOf(act.Token, c)
		id, ok := ids.byAddr[act.Addr]
		if !ok {
			return fmt.Errorf("%s was not announced on this connection", act.Addr)
		}
		return a.c.Remove(act.Token, id)
	}
	return fmt.Errorf("%s is not a path-manager action", act.Kind)
}

// withID runs fn with the local id of addr on the connection, and once
// more with a fresh id if the kernel had forgotten the old one (it retires
// an id when its last subflow goes).
func (a *Lifecycle) withID(token uint32, c *policy.Conn, addr netip.AddrPort, fn func(id uint8) error) error {
	ids := a.idsOf(token, c)
	id, known := ids.byAddr[addr]
	if !known {
		var err error
		if id, err = ids.next(addr); err != nil {
			return err
		}
	}
	err := fn(id)
	if err != nil && known && id != 0 && strings.Contains(err.Error(), "did not match address and id") {
		delete(ids.byAddr, addr)
		if id, err = ids.next(addr); err != nil {
			return err
		}
		err = fn(id)
	}
	return err
}

func (ids *localIDs) next(addr netip.AddrPort) (uint8, error) {
	for i := 1; i < 256; i++ {
		if !ids.used[i] {
			ids.used[i] = true
			ids.byAddr[addr] = uint8(i)
			return uint8(i), nil
		}
	}
	return 0, errors.New("every local address id (1 to 255) of the connection is taken")
}

// idsOf returns the connection's id map, seeded with what the kernel
// already uses: id 0 for the connection's own address, and the ids of its
// subflows (an address opened with an ephemeral port shares one id).
func (a *Lifecycle) idsOf(token uint32, c *policy.Conn) *localIDs {
	ids := a.ids[token]
	if ids == nil {
		ids = &localIDs{byAddr: map[netip.AddrPort]uint8{}}
		ids.used[0] = true
		a.ids[token] = ids
	}
	if c == nil {
		return ids
	}
	if c.Local.IsValid() {
		ids.byAddr[netip.AddrPortFrom(c.Local.Addr(), 0)] = 0
	}
	for _, sfs := range [][]observe.Subflow{c.Subflows, c.Pending} {
		for _, sf := range sfs {
			if sf.LocalID == 0 {
				continue
			}
			ids.used[sf.LocalID] = true
			key := netip.AddrPortFrom(sf.Local.Addr(), 0)
			if _, ok := ids.byAddr[key]; !ok {
				ids.byAddr[key] = sf.LocalID
			}
		}
	}
	return ids
}

// Forget drops the id maps of connections that are gone.
func (a *Lifecycle) Forget(live func(token uint32) bool) {
	for tok := range a.ids {
		if !live(tok) {
			delete(a.ids, tok)
		}
	}
}
