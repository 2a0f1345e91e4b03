package lasthop_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"mpsteer/internal/lasthop"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// hwsimPhys loads mac80211_hwsim with two radios and returns their phy
// names; the module goes away when the test ends.
func hwsimPhys(t *testing.T) []string {
	t.Helper()
	if _, err := os.Stat("/sys/module/mac80211_hwsim"); err == nil {
		t.Fatal("mac80211_hwsim is loaded already: its radios may be in use")
	}
	if out, err := exec.Command("modprobe", "mac80211_hwsim", "radios=2").CombinedOutput(); err != nil {
		t.Skipf("kernel lacks mac80211_hwsim: this kernel (%s) cannot load it (Debian's kernels ship it as a module): %v: %s", release(), err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("modprobe", "-r", "mac80211_hwsim").CombinedOutput(); err != nil {
			t.Errorf("unload mac80211_hwsim: %v: %s", err, out)
		}
	})
	var phys []string
	ents, _ := filepath.Glob("/sys/class/ieee80211/*/hwsim")
	if len(ents) == 0 {
		// Older kernels: the driver is named on the device.
		ents, _ = filepath.Glob("/sys/class/ieee80211/*")
	}
	for _, e := range ents {
		phy := filepath.Base(strings.TrimSuffix(e, "/hwsim"))
		if drv, err := os.Readlink(filepath.Join("/sys/class/ieee80211", phy, "device/driver")); err == nil && strings.HasSuffix(drv, "hwsim") {
			phys = append(phys, phy)
		}
	}
	if len(phys) != 2 {
		t.Fatalf("mac80211_hwsim radios=2 made the phys %v", phys)
	}
	return phys
}

func release() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// ifaceOf is the one interface of a phy (wlanN), read while the phy is in
// the host's namespace.
func ifaceOf(t *testing.T, phy string) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/sys/class/ieee80211", phy, "device/net"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("interfaces of %s: %v, %v", phy, ents, err)
	}
	return ents[0].Name()
}

// daemon runs a command in a namespace until the test ends.
func daemon(t *testing.T, ns string, out *syncBuffer, args ...string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The Wi-Fi source against a real nl80211 stack: mac80211_hwsim's two
// radios, an access point (hostapd) in one namespace and a station
// (wpa_supplicant) in another. The station's signal is what hwsim says
// the radio receives (its debugfs rx_rssi); lowered, the source's reports
// follow it down.
func TestWifiSourceFollowsARealStation(t *testing.T) {
	testutil.RequireRoot(t, "mac80211_hwsim radios in network namespaces")
	testutil.RequireTool(t, "hostapd")
	testutil.RequireTool(t, "wpa_supplicant")
	testutil.RequireTool(t, "iw")
	phys := hwsimPhys(t)
	apPhy, staPhy := phys[0], phys[1]
	apIf, staIf := ifaceOf(t, apPhy), ifaceOf(t, staPhy)
	// The signal a station reports is set through hwsim's rx_rssi, which
	// older kernels apply to what a radio receives and newer ones (6.12)
	// to what it sends, plus its transmit power: both radios get the same
	// value and the access point transmits at 0 dBm, so that either way
	// the station hears the access point at that value.
	setSignal := func(dBm int) {
		t.Helper()
		for _, phy := range []string{apPhy, staPhy} {
			// debugfs takes it as an unsigned 64-bit number, cast to int.
			p := filepath.Join("/sys/kernel/debug/ieee80211", phy, "hwsim/rx_rssi")
			if err := os.WriteFile(p, []byte(fmt.Sprint(uint64(int64(dBm)))), 0o644); err != nil {
				t.Fatalf("set %s to %d dBm (debugfs mounted?): %v", p, dBm, err)
			}
		}
	}
	setSignal(-50)

	ap, sta := fmt.Sprintf("wap%d", os.Getpid()), fmt.Sprintf("wsta%d", os.Getpid())
	for _, ns := range []string{ap, sta} {
		if err := netnsutil.Create(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netnsutil.Delete(ns) })
	}
	for phy, ns := range map[string]string{apPhy: ap, staPhy: sta} {
		if out, err := exec.Command("iw", "phy", phy, "set", "netns", "name", ns).CombinedOutput(); err != nil {
			t.Fatalf("iw phy %s set netns: %v: %s", phy, err, out)
		}
	}
	dir := t.TempDir()
	ssid := fmt.Sprintf("mpsteer-%d", os.Getpid())
	apConf, staConf := filepath.Join(dir, "hostapd.conf"), filepath.Join(dir, "wpa.conf")
	os.WriteFile(apConf, []byte(fmt.Sprintf("interface=%s\ndriver=nl80211\nssid=%s\nhw_mode=g\nchannel=1\n", apIf, ssid)), 0o644)
	os.WriteFile(staConf, []byte(fmt.Sprintf("network={\n\tssid=\"%s\"\n\tkey_mgmt=NONE\n\tscan_freq=2412\n}\n", ssid)), 0o644)
	var apOut, staOut syncBuffer
	daemon(t, ap, &apOut, "hostapd", apConf)
	daemon(t, sta, &staOut, "wpa_supplicant", "-D", "nl80211", "-i", staIf, "-c", staConf)

	// The source, opened in the station's namespace (nl80211 sees the
	// wiphys of its own namespace).
	var src lasthop.Source
	err := netnsutil.Do(sta, func() error {
		var err error
		src, err = lasthop.Builtin().Open("wifi", lasthop.Options{Window: 200 * time.Millisecond, Interfaces: []string{staIf}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	// waitHealth samples until the station's report matches.
	waitHealth := func(what string, ok func(lasthop.Sample) bool) lasthop.Sample {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var last map[string]lasthop.Sample
		for time.Now().Before(deadline) {
			s, err := src.Sample()
			if err != nil {
				t.Fatal(err)
			}
			last = s
			if got, found := s[staIf]; found && ok(got) {
				t.Logf("%s: %+v", what, got)
				return got
			}
			time.Sleep(src.Interval()) // the sampling period, as the daemon's loop
		}
		t.Fatalf("%s: last reports %+v\nhostapd: %s\nwpa_supplicant: %s", what, last, apOut.String(), staOut.String())
		return lasthop.Sample{}
	}
	waitHealth("associated", func(s lasthop.Sample) bool { return s.Known })
	if out, err := exec.Command("ip", "netns", "exec", ap, "iw", "dev", apIf, "set", "txpower", "fixed", "0").CombinedOutput(); err != nil {
		t.Fatalf("access point's transmit power: %v: %s", err, out)
	}
	// -50 dBm is a healthy link; the signal degrades: -75 dBm is 0.4 of
	// the way from -85 to -60, -90 is below; and it recovers.
	for _, c := range []struct {
		dBm    int
		health float64
	}{{-50, 1}, {-75, 0.4}, {-90, 0}, {-55, 1}} {
		setSignal(c.dBm)
		got := waitHealth(fmt.Sprintf("signal %d dBm", c.dBm), func(s lasthop.Sample) bool {
			return strings.Contains(s.Detail, fmt.Sprintf("signal %d dBm", c.dBm))
		})
		// With transmissions in the window the health is the lower of the
		// signal's score and theirs.
		if d := got.Health - c.health; d > 1e-9 || (d < -1e-9 && !strings.Contains(got.Detail, " sent")) {
			t.Errorf("at %d dBm: health %v, want %v (%+v)", c.dBm, got.Health, c.health, got)
		}
	}
}
