package policy

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// A key the policy (in the mode its entry selects) does not use is
// refused with its file, line and key, and the keys that are valid
// there; never accepted and ignored.
func TestKeysAPolicyDoesNotUseAreRefused(t *testing.T) {
	cases := []struct{ src, want string }{
		// The packaged config's example: the paper mode's probe keys in
		// the default (shaped) mode.
		{"name: dynthresh\nprobe_interval: 1s\nmax_probe_interval: 8s", `c.yaml:2: probe_interval: `},
		{"name: dynthresh\nprobe_interval: 1s\nmax_probe_interval: 8s", `c.yaml:3: max_probe_interval: `},
		{"name: dynthresh\nmode: shaped\nprobe_window: 300ms", `c.yaml:3: probe_window: `},
		{"name: dynthresh\nmetric: estimate", `c.yaml:2: metric: `},
		{"name: dynthresh\nwarmup: 200ms", `c.yaml:2: warmup: `},
		{"name: dynthresh\nwindow: 1s", `c.yaml:2: window: `},
		{"name: dynthresh\nmode: paper\ngain: 5%", `c.yaml:3: gain: `},
		// The plain rule has no probes.
		{"name: dynthresh\nmode: plain\nprobe_interval: 1s", `c.yaml:3: probe_interval: unknown key "probe_interval" with mode: plain: it is a key of dynthresh mode: paper`},
		{"name: dynthresh\nmode: plain\nretry: 1s", `c.yaml:3: retry: unknown key "retry" with mode: plain: it is a key of dynthresh mode: shaped`},
		{"name: dynthresh\nmode: paper\nheadroom: 90%", `c.yaml:3: headroom: `},
		{"name: dynthresh\nmode: paper\nwindow: 4MiB", `c.yaml:3: window: `},
		{"name: ecf\nprobe_interval: 1s", `c.yaml:2: probe_interval: `},
		{"name: ecf\nmode: paper", `c.yaml:2: mode: `},
		// ramptcp's sender signal has no last hop and no reports.
		{"name: ramptcp\nsignal: sender\nhealth_low: 80%", `c.yaml:3: health_low: `},
		{"name: ramptcp\nsignal: sender\nstale: 2s", `c.yaml:3: stale: `},
		{"name: ramptcp\nmin_segments: 10", `c.yaml:2: min_segments: `},
		{"name: ramptcp\nsignal: reports\nwindow: 1s", `c.yaml:3: window: `},
		// prefer that opens no subflows probes nothing.
		{"name: prefer\nopen_subflows: false\nmax_probes: 4", `c.yaml:3: max_probes: `},
	}
	for _, c := range cases {
		m, err := yamlcfg.Parse("c.yaml", []byte(c.src))
		if err != nil {
			t.Fatal(err)
		}
		Build(m, Env{PathManager: UserspacePM})
		if err := m.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v\nwant it to contain %q", c.src, err, c.want)
		}
	}
}

// The message says which mode the key belongs to and what is valid.
func TestAKeyOfAnotherModeNamesItsMode(t *testing.T) {
	m, err := yamlcfg.Parse("c.yaml", []byte("name: dynthresh\nprobe_interval: 1s"))
	if err != nil {
		t.Fatal(err)
	}
	Build(m, Env{})
	want := `c.yaml:2: probe_interval: unknown key "probe_interval" with mode: shaped (the default): it is a key of dynthresh mode: paper ` +
		`(valid with mode: shaped (the default): entry_factor, far_trial_rtts, gain, headroom, held_share, in_time_caps, in_time_gate, join_backup, ` +
		`margin, mode, name, nearer_factor, notsent_lowat, probe_rtt_pause, probe_rtt_rest, retry, slow_factor, slow_share, startup_guard, trial_rtts, warmup_rtts, window)`
	if err := m.Err(); err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}

// Under the kernel path manager prefer opens no subflows: the keys of
// its opening and probing are refused but for the ones that say "off".
func TestPreferOpeningKeysUnderTheKernelPathManager(t *testing.T) {
	for src, want := range map[string]string{
		"name: prefer\nprobe_interval: 0s\nopen_subflows: false": "",
		"name: prefer\nmax_probes: 4":                            `c.yaml:2: max_probes: under the kernel path manager the probes are the subflows the kernel opens from the re-added endpoint`,
		"name: prefer\nopen_subflows: true":                      `c.yaml:2: open_subflows: prefer opens subflows only under the userspace path manager`,
		"name: prefer\nprobe_interval: 25ms":                     "",
		"name: prefer\nprobe_interval: 2s":                       `c.yaml:2: probe_interval: 2s is above 1s`,
	} {
		m, err := yamlcfg.Parse("c.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		Build(m, Env{PathManager: KernelPM})
		err = m.Err()
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: err = %v, want %q", src, err, want)
		}
	}
}

// Every key of every mode's structs is accepted with its default value
// written out: the structs are the keys there are, and every default is
// within its own bounds.
func TestEveryKeyOfEveryModeTakesItsDefault(t *testing.T) {
	d, r := NewDynThresh(), NewRAMPTCP()
	p, f, inc := NewPrefer(Env{PathManager: UserspacePM}), NewFullmesh(Env{}), NewIncremental(Env{})
	cases := []struct {
		head    string
		structs []any
	}{
		{"name: dynthresh", []any{d.sh.ShaperConfig}},
		{"name: dynthresh\nmode: shaped", []any{d.sh.ShaperConfig}},
		{"name: dynthresh\nmode: paper", []any{d.DynThreshConfig, d.DynThreshProbeConfig}},
		{"name: dynthresh\nmode: plain", []any{d.DynThreshConfig}},
		{"name: ecf", []any{NewECF().sh.ShaperConfig}},
		{"name: ramptcp", []any{r.RAMPTCPConfig, r.RAMPTCPReportsConfig}},
		{"name: ramptcp\nsignal: sender", []any{r.RAMPTCPConfig, r.RAMPTCPSenderConfig}},
		{"name: prefer", []any{p.PreferConfig, p.PreferProbeConfig}},
		{"name: fullmesh", []any{f.FullmeshConfig, f.filter, f.open}},
		{"name: incremental", []any{inc.filter, inc.open}},
	}
	for _, c := range cases {
		src := c.head
		n := 0
		for _, s := range c.structs {
			v := reflect.ValueOf(s)
			for _, key := range yamlcfg.Keys(s) {
				fv := fieldOfKey(v, key)
				var text string
				switch x := fv.Interface().(type) {
				case time.Duration, units.Rate, units.Size, units.Fraction:
					text = fmt.Sprint(x)
				case float64, int, bool:
					text = fmt.Sprint(x)
				case string:
					text = x
				default:
					continue // lists and the like: their own tests
				}
				if key == "max_probes" && text == "0" {
					text = "32" // 0: the default, whichever it is
				}
				src += fmt.Sprintf("\n%s: %q", key, text)
				n++
			}
		}
		m, err := yamlcfg.Parse("c.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		Build(m, Env{PathManager: UserspacePM})
		if err := m.Err(); err != nil || n < 2 {
			t.Errorf("%s\n(%d keys): %v", src, n, err)
		}
	}
}

// fieldOfKey finds the field tagged with key in v's struct (embedded
// structs included).
func fieldOfKey(v reflect.Value, key string) reflect.Value {
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if tag, ok := f.Tag.Lookup("yaml"); ok && tag == key {
			return v.Field(i)
		}
		if _, ok := f.Tag.Lookup("yaml"); !ok && f.Anonymous {
			if fv := fieldOfKey(v.Field(i), key); fv.IsValid() {
				return fv
			}
		}
	}
	return reflect.Value{}
}
