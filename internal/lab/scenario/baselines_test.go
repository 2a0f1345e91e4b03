package scenario

import (
	"path/filepath"
	"strings"
	"testing"
)

// Every shipped scenario that claims a gain (a variant runs a policy: a
// daemon or mptcpd) runs default MPTCP and TCP over the best path beside
// it, under the names scripts look for (issue 21), unless it says here
// why not.
func TestShippedGainScenariosHaveTheBaselines(t *testing.T) {
	noTCPBest := map[string]string{
		// A TCP connection hashed onto a failing core link stalls for
		// good: its runs would fail, and those that count be the lucky ones.
		"fullmesh-failures": "robustness run: single-path TCP dies with its link",
		// Its competitors cross path b, which TCP over the best path (a)
		// does not build; the claim is where MPTCP's traffic goes, not a
		// gain over single-path TCP (coupled-disjoint has that baseline).
		"coupled-congested": "competitors on a path tcp-best does not build",
	}
	files, _ := filepath.Glob("../../../scenarios/*.yaml")
	if len(files) == 0 {
		t.Fatal("no shipped scenarios found")
	}
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		gain := false
		for _, v := range s.Variants {
			gain = gain || len(v.Daemon) > 0 || v.Mptcpd != ""
		}
		if !gain {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if v := s.Variant("mptcp"); v == nil || v.Kind != KindMPTCP || len(v.Daemon) > 0 {
			t.Errorf("%s: no plain mptcp variant", name)
		}
		v := s.Variant(TCPBest)
		if _, excused := noTCPBest[name]; excused {
			if v != nil {
				t.Errorf("%s: has tcp-best, but is listed as without it", name)
			}
			continue
		}
		if v == nil || v.Kind != KindTCP {
			t.Errorf("%s: no tcp-best variant (TCP over the best path)", name)
		}
	}
}
