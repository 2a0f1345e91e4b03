package lasthop

import (
	"math"
	"strings"
	"testing"
)

func TestRatio(t *testing.T) {
	if s := Ratio(80, 20, 5); !s.Known || math.Abs(s.Health-0.8) > 1e-9 {
		t.Fatalf("80 of 100: %+v", s)
	}
	if s := Ratio(3, 0, 5); s.Known {
		t.Fatalf("3 packets: %+v, want not known", s)
	}
	if s := Ratio(0, 0, 1); s.Known {
		t.Fatalf("nothing: %+v", s)
	}
}

func TestWifiScore(t *testing.T) {
	// Strong signal, no counters yet: the signal alone.
	if s := WifiScore(-50, WifiCounters{}, WifiCounters{Packets: 10}, false, 5); !s.Known || s.Health != 1 {
		t.Fatalf("-50 dBm: %+v", s)
	}
	// Weak signal.
	if s := WifiScore(-80, WifiCounters{}, WifiCounters{}, false, 5); math.Abs(s.Health-0.2) > 1e-9 {
		t.Fatalf("-80 dBm: %+v", s)
	}
	// Good signal, 20% of transmissions failing.
	s := WifiScore(-55, WifiCounters{Packets: 100, Failed: 10}, WifiCounters{Packets: 180, Failed: 30}, true, 5)
	if !s.Known || math.Abs(s.Health-0.8) > 1e-9 || !strings.Contains(s.Detail, "20 failed") {
		t.Fatalf("20%% failed: %+v", s)
	}
	// Counters reset (driver reload): the signal alone.
	if s := WifiScore(-55, WifiCounters{Packets: 100}, WifiCounters{Packets: 5}, true, 5); s.Health != 1 {
		t.Fatalf("reset counters: %+v", s)
	}
}

func TestOpenUnknown(t *testing.T) {
	if _, err := Builtin().Open("radio", Options{}); err == nil || !strings.Contains(err.Error(), "wifi") {
		t.Fatalf("unknown source: %v", err)
	}
}
