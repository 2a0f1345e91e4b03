package pm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
)

// EventType is an MPTCP_EVENT_* value.
type EventType uint8

const (
	EventCreated         EventType = 1
	EventEstablished     EventType = 2
	EventClosed          EventType = 3
	EventAnnounced       EventType = 6
	EventRemoved         EventType = 7
	EventSubEstablished  EventType = 10
	EventSubClosed       EventType = 11
	EventSubPriority     EventType = 13
	EventListenerCreated EventType = 15
	EventListenerClosed  EventType = 16
)

var eventNames = map[EventType]string{
	EventCreated: "created", EventEstablished: "established", EventClosed: "closed",
	EventAnnounced: "announced", EventRemoved: "removed",
	EventSubEstablished: "sub_established", EventSubClosed: "sub_closed", EventSubPriority: "sub_priority",
	EventListenerCreated: "listener_created", EventListenerClosed: "listener_closed",
}

func (t EventType) String() string {
	if n, ok := eventNames[t]; ok {
		return n
	}
	return fmt.Sprintf("event(%d)", uint8(t))
}

// Event attributes (enum mptcp_event_attr).
const (
	evToken       = 1
	evFamily      = 2
	evLocID       = 3
	evRemID       = 4
	evSaddr4      = 5
	evSaddr6      = 6
	evDaddr4      = 7
	evDaddr6      = 8
	evSport       = 9
	evDport       = 10
	evBackup      = 11
	evError       = 12
	evFlags       = 13
	evTimeout     = 14
	evIfIdx       = 15
	evResetReason = 16
	evResetFlags  = 17
	evServerSide  = 18
)

// Event is one notification from the mptcp_pm_events group. Ports are in
// host byte order (the kernel sends them big-endian).
type Event struct {
	Type        EventType
	Token       uint32
	LocalID     uint8
	RemoteID    uint8
	Local       netip.AddrPort
	Remote      netip.AddrPort
	Backup      bool
	Error       uint8
	Flags       uint16
	Timeout     uint32
	IfIndex     uint32
	ResetReason uint32
	ResetFlags  uint32
	ServerSide  bool
	// Received is when the event was read from the socket (monotonic clock),
	// used to measure reaction latency.
	Received time.Time
}

func (e Event) String() string {
	return fmt.Sprintf("%s token=%08x %s -> %s loc_id=%d rem_id=%d backup=%v", e.Type, e.Token, e.Local, e.Remote, e.LocalID, e.RemoteID, e.Backup)
}

// DecodeEvent parses one event message.
func DecodeEvent(m genetlink.Message) (Event, error) {
	ev := Event{Type: EventType(m.Header.Command)}
	ad, err := netlink.NewAttributeDecoder(m.Data)
	if err != nil {
		return ev, err
	}
	var saddr, daddr netip.Addr
	var sport, dport uint16
	for ad.Next() {
		switch ad.Type() {
		case evToken:
			ev.Token = ad.Uint32()
		case evLocID:
			ev.LocalID = ad.Uint8()
		case evRemID:
			ev.RemoteID = ad.Uint8()
		case evSaddr4:
			saddr = addrFromBytes(ad.Bytes())
		case evSaddr6:
			saddr = addrFromBytes(ad.Bytes())
		case evDaddr4:
			daddr = addrFromBytes(ad.Bytes())
		case evDaddr6:
			daddr = addrFromBytes(ad.Bytes())
		case evSport:
			sport = be16(ad.Bytes())
		case evDport:
			dport = be16(ad.Bytes())
		case evBackup:
			ev.Backup = ad.Uint8() != 0
		case evError:
			ev.Error = ad.Uint8()
		case evFlags:
			ev.Flags = ad.Uint16()
		case evTimeout:
			ev.Timeout = ad.Uint32()
		case evIfIdx:
			ev.IfIndex = ad.Uint32()
		case evResetReason:
			ev.ResetReason = ad.Uint32()
		case evResetFlags:
			ev.ResetFlags = ad.Uint32()
		case evServerSide:
			ev.ServerSide = ad.Uint8() != 0
		}
	}
	if saddr.IsValid() {
		ev.Local = netip.AddrPortFrom(saddr.Unmap(), sport)
	}
	if daddr.IsValid() {
		ev.Remote = netip.AddrPortFrom(daddr.Unmap(), dport)
	}
	return ev, ad.Err()
}

// be16 reads a big-endian port (0 when the attribute is too short).
func be16(b []byte) uint16 {
	if len(b) < 2 {
		return 0
	}
	return binary.BigEndian.Uint16(b)
}

func addrFromBytes(b []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(b)
	return a
}

// EventListener receives path-manager events in one namespace.
type EventListener struct {
	c *genetlink.Conn
}

// ListenEvents joins the event group.
func ListenEvents(o Options) (*EventListener, error) {
	cfg, done, err := o.netlinkConfig()
	if err != nil {
		return nil, fmt.Errorf("mptcp_pm events: %w", err)
	}
	c, err := genetlink.Dial(cfg)
	done()
	if err != nil {
		return nil, fmt.Errorf("mptcp_pm events: %w", err)
	}
	fam, err := c.GetFamily(FamilyName)
	if err != nil {
		c.Close()
		return nil, ErrNoMPTCP
	}
	var gid uint32
	for _, g := range fam.Groups {
		if g.Name == EventGroup {
			gid = g.ID
		}
	}
	if gid == 0 {
		c.Close()
		return nil, fmt.Errorf("mptcp_pm events: the family has no %q group", EventGroup)
	}
	if err := c.JoinGroup(gid); err != nil {
		c.Close()
		return nil, fmt.Errorf("mptcp_pm events: join group: %w", err)
	}
	// A burst of connections must not overflow the socket and lose events.
	_ = c.SetReadBuffer(4 << 20)
	return &EventListener{c: c}, nil
}

// Receive blocks until at least one event arrives.
func (l *EventListener) Receive() ([]Event, error) {
	msgs, _, err := l.c.Receive()
	now := time.Now()
	if err != nil {
		return nil, err
	}
	out := make([]Event, 0, len(msgs))
	var errs error
	for _, m := range msgs {
		ev, err := DecodeEvent(m)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		ev.Received = now
		out = append(out, ev)
	}
	return out, errs
}

// SetDeadline lets a caller stop a blocked Receive.
func (l *EventListener) SetDeadline(t time.Time) error { return l.c.SetReadDeadline(t) }

// Close stops listening.
func (l *EventListener) Close() error { return l.c.Close() }
