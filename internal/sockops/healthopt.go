package sockops

import "fmt"

// The path-health option (bpf/health.h), in Go: the reference the tests
// hold the C to, and what tools use to read captured packets.
const (
	OptionKind     = 253    // RFC 6994 experimental
	OptionExID     = 0x5241 // "RA"; not registered with IANA
	optionHdr      = 4
	optionEntry    = 4
	MaxReportPaths = 8
	optionMaxLen   = optionHdr + MaxReportPaths*optionEntry
)

// Entry is one path in a report, as on the wire.
type Entry struct {
	// PeerID is the address id of the path's end at the recipient (its
	// local id); OwnID the one at the reporter.
	PeerID, OwnID uint8
	// Loss (indications per segment) and LastHop (health), 0..Scale or
	// Unknown.
	Loss, LastHop uint8
}

// ParseStatus says why an option was refused (health.h's enum hl_status).
type ParseStatus int

const (
	ParseOK ParseStatus = iota
	ParseShort
	ParseKind
	ParseTruncated
	ParseLength
	ParseExID
)

func (s ParseStatus) String() string {
	return [...]string{"ok", "short", "kind", "truncated", "length", "exid"}[s]
}

func valueOK(v uint8) bool { return v <= Scale || v == Unknown }

// ParseOption reads an option (b holds the bytes the packet has of it,
// starting at its kind): the entries it carries, a bit per entry whose
// values are in range, or why it was refused. It does what hl_parse does.
func ParseOption(b []byte) ([]Entry, uint32, ParseStatus) {
	if len(b) < optionHdr+optionEntry || len(b) > 40 {
		return nil, 0, ParseShort
	}
	if b[0] != OptionKind {
		return nil, 0, ParseKind
	}
	l := int(b[1])
	if l > len(b) {
		return nil, 0, ParseTruncated
	}
	if l < optionHdr+optionEntry || l > optionMaxLen || (l-optionHdr)%optionEntry != 0 {
		return nil, 0, ParseLength
	}
	if b[2] != OptionExID>>8 || b[3] != OptionExID&0xff {
		return nil, 0, ParseExID
	}
	k := (l - optionHdr) / optionEntry
	out := make([]Entry, k)
	var valid uint32
	for i := range out {
		e := b[optionHdr+i*optionEntry:]
		out[i] = Entry{PeerID: e[0], OwnID: e[1], Loss: e[2], LastHop: e[3]}
		if valueOK(e[2]) && valueOK(e[3]) {
			valid |= 1 << i
		}
	}
	return out, valid, ParseOK
}

// FitEntries is how many of n entries fit in room bytes of option space.
func FitEntries(room, n int) int {
	if room < optionHdr+optionEntry || n <= 0 {
		return 0
	}
	return min((room-optionHdr)/optionEntry, n, MaxReportPaths)
}

// EncodeOption writes an option with the given entries (1 to 8).
func EncodeOption(es []Entry) ([]byte, error) {
	if len(es) < 1 || len(es) > MaxReportPaths {
		return nil, fmt.Errorf("a report carries 1 to %d paths, not %d", MaxReportPaths, len(es))
	}
	b := []byte{OptionKind, byte(optionHdr + optionEntry*len(es)), OptionExID >> 8, OptionExID & 0xff}
	for _, e := range es {
		b = append(b, e.PeerID, e.OwnID, e.Loss, e.LastHop)
	}
	return b, nil
}

// Fraction turns an option byte into a fraction of 1 (ok false: Unknown
// or out of range).
func Fraction(v uint8) (float64, bool) {
	if v > Scale {
		return 0, false
	}
	return float64(v) / Scale, true
}

// Byte turns a fraction into an option byte (clamped to 0..Scale).
func Byte(f float64) uint8 {
	switch {
	case f <= 0:
		return 0
	case f >= 1:
		return Scale
	}
	return uint8(f*Scale + 0.5)
}
