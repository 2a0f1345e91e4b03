package lasthop

import (
	"fmt"
	"sync"
	"time"

	"github.com/mdlayher/wifi"
)

// The Wi-Fi source reads the station information nl80211 keeps for each
// wireless interface in station mode (through mdlayher/wifi): the signal
// of the access point and the interface's transmit retries and failures.
// Its health is the lower of two scores: the signal, from 1 at -60 dBm or
// better down to 0 at -85 dBm or worse, and the share of transmissions
// that did not fail over the window (counters are cumulative; the window
// is between two samples). Retries count half a failure: the radio got
// the frame through, late.

type wifiSource struct {
	c      *wifi.Client
	o      Options
	mu     sync.Mutex
	prev   map[int]WifiCounters
	prevAt time.Time
}

// WifiCounters are a station's cumulative transmit counters.
type WifiCounters struct {
	Packets, Retries, Failed int
}

func openWifi(o Options) (Source, error) {
	c, err := wifi.New()
	if err != nil {
		return nil, fmt.Errorf("nl80211: %w", err)
	}
	if o.Window <= 0 {
		o.Window = 500 * time.Millisecond
	}
	return &wifiSource{c: c, o: o, prev: map[int]WifiCounters{}}, nil
}

func (s *wifiSource) Interval() time.Duration { return s.o.Window }

func (s *wifiSource) Close() error { return s.c.Close() }

func (s *wifiSource) wanted(name string) bool {
	if len(s.o.Interfaces) == 0 {
		return true
	}
	for _, n := range s.o.Interfaces {
		if n == name {
			return true
		}
	}
	return false
}

func (s *wifiSource) Sample() (map[string]Sample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ifis, err := s.c.Interfaces()
	if err != nil {
		return nil, err
	}
	out := map[string]Sample{}
	for _, ifi := range ifis {
		if ifi.Name == "" || ifi.Type != wifi.InterfaceTypeStation || !s.wanted(ifi.Name) {
			continue
		}
		stas, err := s.c.StationInfo(ifi)
		if err != nil || len(stas) == 0 {
			continue // not associated
		}
		st := stas[0]
		cur := WifiCounters{Packets: st.TransmittedPackets, Retries: st.TransmitRetries, Failed: st.TransmitFailed}
		prev, had := s.prev[ifi.Index]
		s.prev[ifi.Index] = cur
		out[ifi.Name] = WifiScore(st.Signal, prev, cur, had, s.o.MinPackets)
	}
	return out, nil
}

// WifiScore turns a station's signal (dBm) and its counters at the start
// and end of a window into a health sample.
func WifiScore(signal int, prev, cur WifiCounters, had bool, minPackets int) Sample {
	sig := float64(signal+85) / 25
	sig = max(0, min(1, sig))
	s := Sample{Health: sig, Known: signal != 0, Detail: fmt.Sprintf("signal %d dBm", signal)}
	if !had || cur.Packets < prev.Packets {
		return s
	}
	sent := cur.Packets - prev.Packets
	failed := max(cur.Failed-prev.Failed, 0)
	retries := max(cur.Retries-prev.Retries, 0)
	if sent+failed < minPackets {
		return s
	}
	tx := 1 - (float64(failed)+0.5*float64(retries))/float64(sent+failed)
	tx = max(0, min(1, tx))
	s.Detail += fmt.Sprintf(", %d sent, %d retries, %d failed", sent, retries, failed)
	s.Health = min(s.Health, tx)
	s.Known = true
	return s
}
