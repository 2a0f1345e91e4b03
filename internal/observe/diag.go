// Package observe turns kernel state into plain values: MPTCP connections
// and their TCP subflows, sampled from sock_diag (inet_diag) by Sampler,
// and what only the path manager's events tell (which side opened a
// connection, the addresses the peer announced, the subflows that closed
// and why), kept by Tracker from the events its owner feeds it.
package observe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"mpsteer/internal/netnsutil"
)

// Subflow is one TCP subflow of an MPTCP connection, as the kernel sees it.
type Subflow struct {
	Local, Remote netip.AddrPort
	// Token is the local token of the MPTCP connection (groups subflows).
	Token       uint32
	RemoteToken uint32
	LocalID     uint8
	RemoteID    uint8
	// BackupLocal: this host asked the peer not to use the subflow
	// (request_bkup, BKUP_LOC). BackupRemote: the peer asked this host not
	// to (backup, BKUP_REM). The kernel's scheduler avoids the subflow for
	// sending when either is set.
	BackupLocal  bool
	BackupRemote bool
	MPFlags      uint32
	State        uint8
	CC           string
	SRTT         time.Duration
	RTTVar       time.Duration
	MinRTT       time.Duration
	RTO          time.Duration
	Backoff      uint8
	Cwnd         uint32 // segments
	Ssthresh     uint32
	MSS          uint32 // bytes (snd_mss)
	PacingRate   uint64 // bytes/s
	DeliveryRate uint64 // bytes/s
	BytesSent    uint64
	BytesAcked   uint64
	BytesRecv    uint64
	BytesRetrans uint64
	TotalRetrans uint32 // segments retransmitted over the lifetime
	Lost         uint32
	Unacked      uint32
	NotSent      uint32        // bytes queued on the subflow, not sent yet
	SndWnd       uint32        // the window the peer advertises, bytes (MPTCP: the data-level window)
	LastDataSent time.Duration // since the last data was sent
	LastAckRecv  time.Duration // since the last ACK arrived
	CAState      uint8         // congestion-avoidance state (4 = loss recovery after an RTO)
	Cookie       uint64        // kernel socket cookie: stable identity
	// Interface is the index of the device the socket is bound to (0:
	// none); a subflow from an endpoint with a device is bound to it.
	Interface uint32
	// CgroupID is the cgroup v2 id of the socket (the inode number of its
	// cgroup's directory: the cgroup of the process that made it, which
	// MPTCP gives every subflow of a connection); 0 when unknown.
	CgroupID uint64
	// MPTCP is false for a plain TCP socket (returned by TCP only).
	MPTCP bool
	// BBR is BBR's own state where the congestion control is "bbr" and
	// the sampler can read it (the BPF iterator; not Known elsewhere).
	BBR BBRState
}

// BBRState is what tcp_bbr.c keeps that tcp_info does not show (a value,
// not a pointer: the sampler makes no allocation per subflow).
type BBRState struct {
	Known bool
	Mode  BBRMode
	// MinRTTAge: since BBR's min_rtt filter was last refreshed (by an RTT
	// sample below it, or the end of a ProbeRTT). At BBRMinRTTWindow it
	// expires, and the next ACK puts BBR into ProbeRTT (unless the socket
	// restarts from idle).
	MinRTTAge time.Duration
}

// BBRMode is tcp_bbr.c's mode.
type BBRMode uint8

// BBR's modes.
const (
	BBRStartup BBRMode = iota
	BBRDrain
	BBRProbeBW
	BBRProbeRTT
)

// BBRMinRTTWindow is how long BBR's min_rtt filter lasts
// (bbr_min_rtt_win_sec).
const BBRMinRTTWindow = 10 * time.Second

// ProbeRTTIn is how long until BBR's min_rtt filter expires (negative:
// expired that long ago; ok false where BBR's state is unknown).
func (s Subflow) ProbeRTTIn() (time.Duration, bool) {
	if !s.BBR.Known {
		return 0, false
	}
	return BBRMinRTTWindow - s.BBR.MinRTTAge, true
}

// Key identifies a subflow across samples.
func (s Subflow) Key() string { return s.Local.String() + "-" + s.Remote.String() }

// Backup reports whether the local sender treats the subflow as backup.
func (s Subflow) Backup() bool { return s.BackupLocal || s.BackupRemote }

// JoinIncomplete: an MP_JOIN subflow this host opened whose join has not
// completed (sampled before the fourth ACK, the peer's answer to the
// third): it carries nothing yet, and the kernel sends it no MP_PRIO.
func (s Subflow) JoinIncomplete() bool {
	return s.Cookie != 0 && s.MPFlags&FlagJoinLoc != 0 && s.MPFlags&FlagFullyEst == 0
}

// ThroughputEstimate is cwnd·MSS/SRTT in bytes per second (0 if unknown):
// the metric of the dynamic threshold scheduler.
func (s Subflow) ThroughputEstimate() float64 {
	if s.SRTT <= 0 {
		return 0
	}
	return float64(s.Cwnd) * float64(s.MSS) / s.SRTT.Seconds()
}

// Conn is one MPTCP connection (the MPTCP socket).
type Conn struct {
	Local, Remote netip.AddrPort
	Token         uint32
	Subflows      uint8 // extra subflows (besides the initial one)
	SubflowsTotal uint8
	Fallback      bool // fell back to plain TCP
	// Counters: the kernel gave the byte and retransmission counters
	// below (Linux 6.5 on; before, only the token, flags and subflow
	// counts).
	Counters     bool
	BytesSent    uint64
	BytesAcked   uint64
	BytesRecv    uint64
	BytesRetrans uint64
	Retransmits  uint32
	State        uint8
	CgroupID     uint64 // the MPTCP socket's cgroup v2 id (see Subflow.CgroupID)
}

// MPTCP subflow flags (MPTCP_SUBFLOW_FLAG_*).
const (
	FlagMCapRem   = 0x1
	FlagMCapLoc   = 0x2
	FlagJoinRem   = 0x4
	FlagJoinLoc   = 0x8
	FlagBkupRem   = 0x10
	FlagBkupLoc   = 0x20
	FlagFullyEst  = 0x40
	FlagConnected = 0x80
	FlagMapValid  = 0x100
)

const (
	inetDiagInfo        = 2
	inetDiagCong        = 4
	inetDiagULPInfo     = 19
	inetDiagCgroupID    = 21 // INET_DIAG_CGROUP_ID, Linux 5.7
	inetDiagReqProtocol = 3
	ulpInfoName         = 1
	ulpInfoMPTCP        = 3
	sfAttrTokenRem      = 1
	sfAttrTokenLoc      = 2
	sfAttrFlags         = 8
	sfAttrIDRem         = 9
	sfAttrIDLoc         = 10
	ipprotoMPTCP        = 262
	tcpListen           = 10
	tcpClose            = 7
	diagMsgLen          = 72
	diagReqLen          = 56
	tcpDiagGetSock      = 18 // TCPDIAG_GETSOCK
	compatReqLen        = 60
)

// dumpBufferSize is the buffer a sock_diag dump is read into (the kernel's
// dump datagrams are at most 32 KiB).
const dumpBufferSize = 64 << 10

// Sampler reads sockets of one network namespace.
type Sampler struct {
	c        *netlink.Conn
	noCompat bool // the kernel refused TCPDIAG_GETSOCK
}

// NewSamplerIn opens a sampler in the named network namespace
// (/run/netns/NAME).
func NewSamplerIn(ns string) (*Sampler, error) {
	h, err := netnsutil.Open(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return NewSampler(int(h))
}

// NewSampler opens a sock_diag socket in the namespace given by the open
// file descriptor netnsFD (0 = the caller's namespace).
func NewSampler(netnsFD int) (*Sampler, error) {
	// A fixed receive buffer: without one, every datagram of a dump is
	// peeked at for its size first (two system calls and a new buffer per
	// datagram). The kernel's dump datagrams are at most 32 KiB.
	c, err := netlink.Dial(unix.NETLINK_INET_DIAG, &netlink.Config{NetNS: netnsFD, MessageBufferSize: dumpBufferSize})
	if err != nil {
		return nil, fmt.Errorf("sock_diag: %w", err)
	}
	// Dumps of thousands of sockets arrive in bursts.
	_ = c.SetReadBuffer(8 << 20)
	return &Sampler{c: c}, nil
}

// Close releases the socket.
func (s *Sampler) Close() error { return s.c.Close() }

func diagRequest(family uint8, ext uint8, states uint32, mptcp bool) []byte {
	b := make([]byte, diagReqLen, diagReqLen+8)
	b[0] = family
	b[1] = unix.IPPROTO_TCP
	b[2] = ext
	binary.NativeEndian.PutUint32(b[4:], states)
	if mptcp {
		// sdiag_protocol is a byte; larger protocols go in an attribute.
		b = append(b, 8, 0, inetDiagReqProtocol, 0, 0, 0, 0, 0)
		binary.NativeEndian.PutUint32(b[diagReqLen+4:], ipprotoMPTCP)
	}
	return b
}

func (s *Sampler) dump(req []byte) ([]netlink.Message, error) {
	return s.c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.SOCK_DIAG_BY_FAMILY, Flags: netlink.Request | netlink.Dump},
		Data:   req,
	})
}

// allButListen selects every TCP state except LISTEN and CLOSE.
const allButListen = ^uint32(0) &^ (1 << tcpListen) &^ (1 << tcpClose)

// Subflows returns every TCP socket that carries MPTCP (a subflow), IPv4
// and IPv6.
func (s *Sampler) Subflows() ([]Subflow, error) {
	all, err := s.TCP()
	out := all[:0]
	for _, sf := range all {
		if sf.MPTCP {
			out = append(out, sf)
		}
	}
	return out, err
}

// TCP returns every TCP socket that is not listening, MPTCP subflows and
// plain TCP alike.
//
// The kernel walks its whole established-socket hash table for a dump
// (sized by memory and shared by every namespace: 262144 buckets here),
// whatever the namespace holds; that walk is most of a sample's cost. The
// old TCPDIAG_GETSOCK request dumps IPv4 and IPv6 in one walk, where
// SOCK_DIAG_BY_FAMILY needs one per family; the per-family requests stay
// as the fallback for kernels without it.
func (s *Sampler) TCP() ([]Subflow, error) {
	ext := uint8(1<<(inetDiagInfo-1) | 1<<(inetDiagCong-1))
	if !s.noCompat {
		msgs, err := s.c.Execute(netlink.Message{
			Header: netlink.Header{Type: tcpDiagGetSock, Flags: netlink.Request | netlink.Dump},
			Data:   compatRequest(ext, allButListen),
		})
		if err == nil {
			return parseSubflows(msgs), nil
		}
		s.noCompat = true
	}
	var out []Subflow
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		msgs, err := s.dump(diagRequest(fam, ext, allButListen, false))
		if err != nil {
			return nil, fmt.Errorf("sock_diag dump (tcp): %w", err)
		}
		out = append(out, parseSubflows(msgs)...)
	}
	return out, nil
}

func parseSubflows(msgs []netlink.Message) []Subflow {
	out := make([]Subflow, 0, len(msgs))
	for _, m := range msgs {
		if sf, ok := parseSubflow(m.Data); ok {
			out = append(out, sf)
		}
	}
	return out
}

// compatRequest is struct inet_diag_req (the pre-sock_diag layout): family
// (0: both), address lengths, extensions, the socket id, states, tables.
func compatRequest(ext uint8, states uint32) []byte {
	b := make([]byte, compatReqLen)
	b[3] = ext
	binary.NativeEndian.PutUint32(b[52:], states)
	return b
}

// Conns returns every MPTCP socket that is not listening.
func (s *Sampler) Conns() ([]Conn, error) {
	var out []Conn
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		msgs, err := s.dump(diagRequest(fam, 1<<(inetDiagInfo-1), allButListen, true))
		if err != nil {
			return nil, fmt.Errorf("sock_diag dump (mptcp): %w", err)
		}
		for _, m := range msgs {
			if c, ok := parseConn(m.Data); ok {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

func parseAddrs(b []byte) (netip.AddrPort, netip.AddrPort) {
	family := b[0]
	sport := binary.BigEndian.Uint16(b[4:])
	dport := binary.BigEndian.Uint16(b[6:])
	var src, dst netip.Addr
	if family == unix.AF_INET {
		src = netip.AddrFrom4([4]byte(b[8:12]))
		dst = netip.AddrFrom4([4]byte(b[24:28]))
	} else {
		src = netip.AddrFrom16([16]byte(b[8:24])).Unmap()
		dst = netip.AddrFrom16([16]byte(b[24:40])).Unmap()
	}
	return netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
}

// parseSubflow decodes an inet_diag_msg with its attributes; MPTCP tells
// subflows from plain TCP sockets.
func parseSubflow(b []byte) (Subflow, bool) {
	var sf Subflow
	if len(b) < diagMsgLen {
		return sf, false
	}
	sf.State = b[1]
	sf.Local, sf.Remote = parseAddrs(b)
	sf.Interface = binary.NativeEndian.Uint32(b[40:])
	sf.Cookie = uint64(binary.NativeEndian.Uint32(b[44:])) | uint64(binary.NativeEndian.Uint32(b[48:]))<<32
	isMPTCP := false
	// The attributes are read in place (a sample reads one message per
	// socket: netlink.AttributeDecoder's copies were most of its garbage),
	// by the decoder's rules.
	ok := walkAttrs(b[diagMsgLen:], func(typ uint16, v []byte) bool {
		switch typ {
		case inetDiagInfo:
			fillTCPInfo(&sf, v)
		case inetDiagCong:
			sf.CC = CCName(v)
		case inetDiagCgroupID:
			sf.CgroupID = cgroupID(v)
		case inetDiagULPInfo:
			return walkAttrs(v, func(typ uint16, v []byte) bool {
				switch typ {
				case ulpInfoName:
					isMPTCP = string(bytes.TrimRight(v, "\x00")) == "mptcp"
				case ulpInfoMPTCP:
					return walkAttrs(v, func(typ uint16, v []byte) bool {
						var ok bool
						switch typ {
						case sfAttrTokenLoc:
							sf.Token, ok = attrUint32(v)
						case sfAttrTokenRem:
							sf.RemoteToken, ok = attrUint32(v)
						case sfAttrFlags:
							sf.MPFlags, ok = attrUint32(v)
						case sfAttrIDLoc:
							sf.LocalID, ok = attrUint8(v)
						case sfAttrIDRem:
							sf.RemoteID, ok = attrUint8(v)
						default:
							ok = true
						}
						return ok
					})
				}
				return true
			})
		}
		return true
	})
	sf.BackupLocal = sf.MPFlags&FlagBkupLoc != 0
	sf.BackupRemote = sf.MPFlags&FlagBkupRem != 0
	sf.MPTCP = isMPTCP
	return sf, ok
}

// walkAttrs calls fn with each netlink attribute of b, its type without
// the flag bits and its payload (in place: fn must copy what it keeps),
// by netlink.AttributeDecoder's rules: a zero length is an empty
// attribute, and b is refused whole if its attributes do not tile it. It
// reports whether b was well formed and fn took every attribute.
func walkAttrs(b []byte, fn func(typ uint16, v []byte) bool) bool {
	const hdr = 4
	step := func(l int) int { return (max(l, hdr) + 3) &^ 3 }
	for i := 0; i < len(b); i += step(int(binary.NativeEndian.Uint16(b[i:]))) {
		if len(b)-i < hdr {
			return false
		}
	}
	for i := 0; i < len(b); {
		l := int(binary.NativeEndian.Uint16(b[i:]))
		typ := binary.NativeEndian.Uint16(b[i+2:]) & attrTypeMask
		if l > len(b)-i || l != 0 && l < hdr {
			return false
		}
		v := b[i+hdr : i+max(l, hdr)]
		if !fn(typ, v) {
			return false
		}
		i += step(l)
	}
	return true
}

// attrTypeMask keeps an attribute's type without NLA_F_NESTED and
// NLA_F_NET_BYTEORDER.
const attrTypeMask = 0x3fff

func attrUint32(v []byte) (uint32, bool) {
	if len(v) != 4 {
		return 0, false
	}
	return binary.NativeEndian.Uint32(v), true
}

func attrUint8(v []byte) (uint8, bool) {
	if len(v) != 1 {
		return 0, false
	}
	return v[0], true
}

// CCName is a congestion control's name (NUL-terminated); the common ones
// without an allocation per socket.
func CCName(v []byte) string {
	v = bytes.TrimRight(v, "\x00")
	for _, n := range [...]string{"cubic", "bbr", "reno", "dctcp"} {
		if string(v) == n {
			return n
		}
	}
	return string(v)
}

// cgroupID reads INET_DIAG_CGROUP_ID (a u64 in host order); 0 when short.
func cgroupID(b []byte) uint64 {
	if len(b) < 8 {
		return 0
	}
	return binary.NativeEndian.Uint64(b)
}

func fillTCPInfo(sf *Subflow, b []byte) {
	var ti unix.TCPInfo
	n := min(len(b), int(unsafe.Sizeof(ti)))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&ti)), unsafe.Sizeof(ti))[:n], b[:n])
	// Before its first RTT sample a socket reports all ones: unknown.
	if ti.Rtt < 1<<31 {
		sf.SRTT = time.Duration(ti.Rtt) * time.Microsecond
	}
	sf.RTTVar = time.Duration(ti.Rttvar) * time.Microsecond
	if ti.Min_rtt < 1<<31 {
		sf.MinRTT = time.Duration(ti.Min_rtt) * time.Microsecond
	}
	sf.RTO = time.Duration(ti.Rto) * time.Microsecond
	sf.Backoff = ti.Backoff
	sf.Cwnd = ti.Snd_cwnd
	sf.Ssthresh = ti.Snd_ssthresh
	sf.MSS = ti.Snd_mss
	sf.PacingRate = ti.Pacing_rate
	sf.DeliveryRate = ti.Delivery_rate
	sf.BytesSent = ti.Bytes_sent
	sf.BytesAcked = ti.Bytes_acked
	sf.BytesRecv = ti.Bytes_received
	sf.BytesRetrans = ti.Bytes_retrans
	sf.TotalRetrans = ti.Total_retrans
	sf.Lost = ti.Lost
	sf.Unacked = ti.Unacked
	sf.NotSent = ti.Notsent_bytes
	sf.SndWnd = ti.Snd_wnd
	sf.LastDataSent = time.Duration(ti.Last_data_sent) * time.Millisecond
	sf.LastAckRecv = time.Duration(ti.Last_ack_recv) * time.Millisecond
	sf.CAState = ti.Ca_state
}

// mptcp_info offsets (struct mptcp_info, 96 bytes in 6.18; 48 before
// 6.5, which added the counters from retransmits on).
const (
	miSubflows      = 0
	miFlags         = 8
	miToken         = 12
	miRetransmits   = 44
	miBytesRetrans  = 48
	miBytesSent     = 56
	miBytesReceived = 64
	miBytesAcked    = 72
	miSubflowsTotal = 80
	miFallback      = 1
)

func parseConn(b []byte) (Conn, bool) {
	var c Conn
	if len(b) < diagMsgLen {
		return c, false
	}
	c.State = b[1]
	c.Local, c.Remote = parseAddrs(b)
	ad, err := netlink.NewAttributeDecoder(b[diagMsgLen:])
	if err != nil {
		return c, false
	}
	for ad.Next() {
		if ad.Type() == inetDiagCgroupID {
			c.CgroupID = cgroupID(ad.Bytes())
		}
		if ad.Type() != inetDiagInfo {
			continue
		}
		mi := ad.Bytes()
		if len(mi) < miToken+4 {
			continue
		}
		c.Subflows = mi[miSubflows]
		c.Fallback = binary.NativeEndian.Uint32(mi[miFlags:])&miFallback != 0
		c.Token = binary.NativeEndian.Uint32(mi[miToken:])
		if len(mi) >= miBytesAcked+8 { // Linux 6.5 on
			c.Counters = true
			c.Retransmits = binary.NativeEndian.Uint32(mi[miRetransmits:])
			c.BytesRetrans = binary.NativeEndian.Uint64(mi[miBytesRetrans:])
			c.BytesSent = binary.NativeEndian.Uint64(mi[miBytesSent:])
			c.BytesRecv = binary.NativeEndian.Uint64(mi[miBytesReceived:])
			c.BytesAcked = binary.NativeEndian.Uint64(mi[miBytesAcked:])
		}
		if len(mi) > miSubflowsTotal {
			c.SubflowsTotal = mi[miSubflowsTotal]
		}
	}
	return c, ad.Err() == nil
}
