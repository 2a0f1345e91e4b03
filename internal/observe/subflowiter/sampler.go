package subflowiter

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/link"

	"mpsteer/internal/observe"
)

// record mirrors struct sf_record of bpf/subflows.bpf.c.
type record struct {
	Cookie, CgroupID              uint64
	PacingRate, DeliveryRate      uint64
	BytesSent, BytesAcked         uint64
	BytesReceived, BytesRetrans   uint64
	Saddr, Daddr                  [16]byte
	Family, Sport, Dport          uint16
	State, Backoff                uint8
	Token, RemoteToken, MPFlags   uint32
	SRTT, RTTVar, MinRTT, RTO     uint32
	Cwnd, Ssthresh, MSS           uint32
	TotalRetrans, Lost, Unacked   uint32
	NotSent, SndWnd               uint32
	LastDataSentMs, LastAckRecvMs uint32
	CAState, LocalID, RemoteID    uint8
	_                             uint8
	CC                            [16]byte
	BBRMinRTTAgeMs                uint32
	BBRMode, BBRValid             uint8
	_                             [2]uint8
}

const recordSize = int(unsafe.Sizeof(record{}))

// Sampler reads the subflows of the network namespace it was opened in.
type Sampler struct {
	objs subflowsObjects
	it   *link.Iter
	buf  []byte
}

// New loads and attaches the iterator. The namespace it reports is the
// calling thread's at each Subflows call (the kernel binds an iterator's
// reader to its opener's namespace).
func New() (*Sampler, error) {
	s := &Sampler{}
	if err := loadSubflowsObjects(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("subflow iterator: load: %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: s.objs.SampleSubflows})
	if err != nil {
		s.objs.Close()
		return nil, fmt.Errorf("subflow iterator: attach: %w", err)
	}
	s.it = it
	return s, nil
}

// Close detaches and unloads the iterator.
func (s *Sampler) Close() error {
	return errors.Join(s.it.Close(), s.objs.Close())
}

// Subflows returns every MPTCP subflow (not listening, not closed), in the
// form observe.Sampler gives, appended to dst[:0].
func (s *Sampler) Subflows(dst []observe.Subflow) ([]observe.Subflow, error) {
	rd, err := s.it.Open()
	if err != nil {
		return nil, fmt.Errorf("subflow iterator: %w", err)
	}
	defer rd.Close()
	n := 0
	for {
		if n == len(s.buf) {
			s.buf = append(s.buf, make([]byte, max(64<<10, len(s.buf)))...)
		}
		m, err := rd.Read(s.buf[n:])
		n += m
		if err == io.EOF || (err == nil && m == 0) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("subflow iterator: read: %w", err)
		}
	}
	if n%recordSize != 0 {
		return nil, fmt.Errorf("subflow iterator: %d bytes is not a whole number of %d-byte records", n, recordSize)
	}
	out := dst[:0]
	if need := n / recordSize; cap(out) < need {
		out = make([]observe.Subflow, 0, need)
	}
	for off := 0; off < n; off += recordSize {
		out = append(out, convert((*record)(unsafe.Pointer(&s.buf[off]))))
	}
	return out, nil
}

func addrPort(family uint16, a *[16]byte, port uint16) netip.AddrPort {
	if family == 10 { // AF_INET6; v4-mapped as IPv4, as observe does
		return netip.AddrPortFrom(netip.AddrFrom16(*a).Unmap(), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[:4])), port)
}

func convert(r *record) observe.Subflow {
	us := func(v uint32) time.Duration { return time.Duration(v) * time.Microsecond }
	sf := observe.Subflow{
		Local:        addrPort(r.Family, &r.Saddr, r.Sport),
		Remote:       addrPort(r.Family, &r.Daddr, r.Dport),
		Token:        r.Token,
		RemoteToken:  r.RemoteToken,
		LocalID:      r.LocalID,
		RemoteID:     r.RemoteID,
		MPFlags:      r.MPFlags,
		BackupLocal:  r.MPFlags&observe.FlagBkupLoc != 0,
		BackupRemote: r.MPFlags&observe.FlagBkupRem != 0,
		State:        r.State,
		CC:           observe.CCName(r.CC[:]),
		RTTVar:       us(r.RTTVar),
		RTO:          us(r.RTO),
		Backoff:      r.Backoff,
		Cwnd:         r.Cwnd,
		Ssthresh:     r.Ssthresh,
		MSS:          r.MSS,
		PacingRate:   r.PacingRate,
		DeliveryRate: r.DeliveryRate,
		BytesSent:    r.BytesSent,
		BytesAcked:   r.BytesAcked,
		BytesRecv:    r.BytesReceived,
		BytesRetrans: r.BytesRetrans,
		TotalRetrans: r.TotalRetrans,
		Lost:         r.Lost,
		Unacked:      r.Unacked,
		NotSent:      r.NotSent,
		SndWnd:       r.SndWnd,
		LastDataSent: time.Duration(r.LastDataSentMs) * time.Millisecond,
		LastAckRecv:  time.Duration(r.LastAckRecvMs) * time.Millisecond,
		CAState:      r.CAState,
		Cookie:       r.Cookie,
		CgroupID:     r.CgroupID,
		MPTCP:        true,
	}
	if r.BBRValid != 0 {
		sf.BBR = observe.BBRState{Known: true, Mode: observe.BBRMode(r.BBRMode), MinRTTAge: time.Duration(r.BBRMinRTTAgeMs) * time.Millisecond}
	}
	// Before its first RTT sample a socket has none (tcp_info: all ones).
	if r.SRTT != 0 {
		sf.SRTT = us(r.SRTT)
	}
	if r.MinRTT != ^uint32(0) {
		sf.MinRTT = us(r.MinRTT)
	}
	return sf
}
