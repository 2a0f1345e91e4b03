package scenario

import (
	"strings"
	"testing"
)

const withCompetitor = `
paths:
  - {name: a, via: core}
  - {name: b, via: core, announce: false}
core: {links: 1, rate: 40mbit, delay: 10ms}
traffic:
  - {type: bulk, duration: 10s, direction: down}
  - {type: bulk, duration: 10s, competitor: true, path: b, streams: 2, reader: blocking}
  - {type: bulk, duration: 10s, competitor: true}
variants:
  - mptcp
  - {name: both, kind: mptcp, paths: [b, a]}
`

// A competitor is plain TCP over its path (default the first), sends the
// way the measured traffic does, is not measured, and every variant
// builds its path; announce: false is kept for via-core paths.
func TestCompetitor(t *testing.T) {
	s, err := Parse("s.yaml", []byte(withCompetitor))
	if err != nil {
		t.Fatal(err)
	}
	c, d := s.Traffic[1], s.Traffic[2]
	if !c.Competitor || c.Path != "b" || c.Streams != 2 || c.Upload || c.Measured(s) {
		t.Errorf("competitor %+v", c)
	}
	if c.Reader != ReaderBlocking || d.Reader != ReaderPoll || s.Traffic[0].Reader != ReaderPoll {
		t.Errorf("readers: %q %q %q, want blocking where set, else poll", c.Reader, d.Reader, s.Traffic[0].Reader)
	}
	if !d.Competitor || d.Path != "a" || d.Upload {
		t.Errorf("competitor without a path: %+v", d)
	}
	if !s.Traffic[0].Measured(s) {
		t.Error("the bulk transfer is not measured")
	}
	if s.Path("a").NoAnnounce || !s.Path("b").NoAnnounce {
		t.Errorf("announce: a %v, b %v", !s.Path("a").NoAnnounce, !s.Path("b").NoAnnounce)
	}
}

func TestCompetitorErrors(t *testing.T) {
	base := "paths:\n  - {name: a, via: core}\n  - {name: b, via: core}\ncore: {links: 1, rate: 10mbit}\n"
	for _, c := range []struct{ name, src, want string }{
		{"path not built", base + "traffic:\n  - {type: bulk, duration: 5s}\n  - {type: bulk, duration: 5s, competitor: true, path: b}\nvariants:\n  - {name: only-a, paths: [a]}\n",
			`s.yaml:9: variants: variant only-a (line 9) does not build path b, which the competitor at line 7 crosses (its paths: a)`},
		{"unknown path", base + "traffic:\n  - {type: bulk, duration: 5s}\n  - {type: bulk, duration: 5s, competitor: true, path: c}\n",
			`s.yaml:7: traffic[1].path: "c" is not a path of this scenario`},
		{"direction", base + "traffic:\n  - {type: bulk, duration: 5s}\n  - {type: bulk, duration: 5s, competitor: true, direction: up}\n",
			`traffic[1].direction: a competitor sends the way the measured traffic does`},
		{"alone", base + "traffic:\n  - {type: bulk, duration: 5s, competitor: true}\n",
			`traffic at line 6 is a competitor, but there is no measured traffic`},
		{"best", base + "traffic:\n  - {type: bulk, duration: 5s}\n  - {type: bulk, duration: 5s, competitor: true}\nvariants:\n  - {name: tcp-best, kind: tcp, path: best}\n",
			`variant tcp-best (line 9) measures TCP over each of a, b in turn`},
		{"reader", base + "traffic:\n  - {type: bulk, duration: 5s, reader: select}\n",
			`s.yaml:6: traffic[0].reader: "select" is not valid (valid: poll, blocking)`},
		{"flows", base + "traffic:\n  - {type: flows, sizes: [1KiB], competitor: true}\n", `traffic[0].competitor: unknown key "competitor"`},
		{"announce direct", "paths:\n  - {name: a, announce: false}\ntraffic: [{type: bulk, duration: 1s}]\n",
			`s.yaml:2: paths[0].announce: announce says whether the server announces a via-core path's own address; this path is direct`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("s.yaml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Count(err.Error(), "\n") > 0 {
				t.Fatalf("error:\n%v\nwant it to contain %q", err, c.want)
			}
		})
	}
}
