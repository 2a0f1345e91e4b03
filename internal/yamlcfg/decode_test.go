package yamlcfg

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/units"
)

type decodeShared struct {
	Margin units.Fraction `yaml:"margin" above:"0%"`
}

type decodeAll struct {
	decodeShared
	Mode    string        `yaml:"mode" enum:"fast,slow"`
	Label   string        `yaml:"label"`
	On      bool          `yaml:"on"`
	Count   int           `yaml:"count" min:"1" max:"32"`
	Factor  float64       `yaml:"factor" min:"1" max:"100"`
	Every   time.Duration `yaml:"every" above:"0s"`
	Rate    units.Rate    `yaml:"rate" max:"10gbit"`
	Buffer  units.Size    `yaml:"buffer" min:"0B" max:"1GiB"`
	Paths   []string      `yaml:"paths"`
	Pairs   decodePairs   `yaml:"pairs"`
	private int           // not a key
	Skip    string        `yaml:"-"`
}

// decodePairs reads "a=b" values itself.
type decodePairs map[string]string

func (p *decodePairs) DecodeField(m *Map, key string) {
	for _, s := range m.Strings(key) {
		a, b, ok := strings.Cut(s, "=")
		if !ok {
			m.Errorf(key, "%q is not a=b", s)
			continue
		}
		if *p == nil {
			*p = decodePairs{}
		}
		(*p)[a] = b
	}
}

func TestDecodeReadsEveryKindAndKeepsDefaults(t *testing.T) {
	src := `mode: slow
on: true
count: 4
every: 250ms
rate: 5mbit
buffer: 64KiB
paths: [wlan0, eth0]
pairs: [x=1]
`
	m, err := Parse("d.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	v := decodeAll{decodeShared: decodeShared{Margin: 0.1}, Mode: "fast", Label: "dflt", Count: 1, Factor: 2, Every: time.Second, Paths: []string{"dflt"}}
	Decode(m, &v)
	m.Done()
	if err := m.Err(); err != nil {
		t.Fatal(err)
	}
	want := decodeAll{decodeShared: decodeShared{Margin: 0.1}, Mode: "slow", Label: "dflt", On: true, Count: 4, Factor: 2,
		Every: 250 * time.Millisecond, Rate: 5 * units.Mbit, Buffer: 64 << 10, Paths: []string{"wlan0", "eth0"}, Pairs: decodePairs{"x": "1"}}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("decoded %+v\nwant    %+v", v, want)
	}
}

func TestDecodeRefusesWithFileLineAndKey(t *testing.T) {
	src := `mode: medium
count: 0
factor: 0.5
every: 0s
rate: 20gbit
buffer: 2GiB
margin: 0%
pairs: [nope]
colour: red
`
	m, err := Parse("d.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var v decodeAll
	Decode(m, &v)
	m.Done()
	err = m.Err()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`d.yaml:1: mode: "medium" is not valid (valid: fast, slow)`,
		`d.yaml:2: count: "0" is not valid (a whole number from 1 to 32)`,
		`d.yaml:3: factor: "0.5" is not valid (a number from 1 to 100)`,
		`d.yaml:4: every: must be above 0s`,
		`d.yaml:5: rate: 20gbit is above 10gbit`,
		`d.yaml:6: buffer: 2GiB is outside 0B to 1GiB`,
		`d.yaml:7: margin: must be above 0%`,
		`d.yaml:8: pairs: "nope" is not a=b`,
		`d.yaml:9: colour: unknown key "colour" (valid here: buffer, count, every, factor, label, margin, mode, on, pairs, paths, rate)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}
	if n := len(strings.Split(err.Error(), "\n")); n != 9 {
		t.Errorf("%d problems reported, want 9 (one per key):\n%v", n, err)
	}
	// A value refused keeps the default.
	if v.Count != 0 || v.Every != 0 || v.Buffer != 0 {
		t.Errorf("refused values were kept: %+v", v)
	}
}

func TestDecodeKeysAndUnknown(t *testing.T) {
	want := []string{"margin", "mode", "label", "on", "count", "factor", "every", "rate", "buffer", "paths", "pairs"}
	if got := Keys(decodeAll{}); !reflect.DeepEqual(got, want) {
		t.Fatalf("Keys = %v, want %v", got, want)
	}
	m, err := Parse("d.yaml", []byte("name: x\nmode: fast\nwho: me\n"))
	if err != nil {
		t.Fatal(err)
	}
	m.String("name", "")
	if got := m.Unknown(); !reflect.DeepEqual(got, []string{"mode", "who"}) {
		t.Fatalf("Unknown = %v before decoding", got)
	}
	Decode(m, &decodeAll{Mode: "fast"})
	if got := m.Unknown(); !reflect.DeepEqual(got, []string{"who"}) {
		t.Fatalf("Unknown = %v after decoding", got)
	}
}

func TestDecodePanicsOnAFieldItCannotRead(t *testing.T) {
	m, _ := Parse("d.yaml", []byte("x: 1\n"))
	for name, v := range map[string]any{
		"no range": &struct {
			X int `yaml:"x"`
		}{},
		"a map": &struct {
			X map[string]int `yaml:"x"`
		}{},
		"bad bound": &struct {
			X time.Duration `yaml:"x" min:"1"`
		}{},
		"not a pointer": struct{}{},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			Decode(m, v)
		}()
	}
}
