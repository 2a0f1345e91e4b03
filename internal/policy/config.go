package policy

import (
	"fmt"
	"slices"
	"strings"

	"mpsteer/internal/yamlcfg"
)

// Every policy's config entry decodes into typed structs (yamlcfg.Decode):
// one set per mode where a policy has modes, each listing exactly the
// keys that mode's code reads, with their defaults (the values the
// policy's constructor puts there), bounds and units. A key that is no
// field of the selected mode's structs is refused with its file, line and
// key; never accepted and ignored.

// configMode is one mode of a policy with modes: the structs its keys
// decode into.
type configMode struct {
	name string
	keys []any // pointers to structs, decoded in order
}

// decodeMode decodes m into the structs of the mode named by chosen and
// refuses the keys of the policy's other modes, saying whose they are and
// what is valid in the chosen one (the keys no mode has are left to
// m.Done). selector is the key that chooses the mode ("mode", "signal");
// dflt says that chosen was not given but is the default.
func decodeMode(m *yamlcfg.Map, policy, selector, chosen string, dflt bool, modes []configMode) {
	var own []string
	for _, md := range modes {
		if md.name != chosen {
			continue
		}
		for _, v := range md.keys {
			yamlcfg.Decode(m, v)
			own = append(own, yamlcfg.Keys(v)...)
		}
	}
	for _, key := range m.Unknown() {
		var in []string
		for _, md := range modes {
			for _, v := range md.keys {
				if slices.Contains(yamlcfg.Keys(v), key) && !slices.Contains(in, md.name) {
					in = append(in, md.name)
				}
			}
		}
		if len(in) == 0 {
			continue
		}
		which := fmt.Sprintf("%s: %s", selector, chosen)
		if dflt {
			which += " (the default)"
		}
		valid := append([]string{"name", selector}, own...)
		slices.Sort(valid)
		m.Errorf(key, "unknown key %q with %s: it is a key of %s %s: %s (valid with %s: %s)",
			key, which, policy, selector, strings.Join(in, " or "), which, strings.Join(slices.Compact(valid), ", "))
		m.Has(key) // reported: not again as unknown
	}
}

// targets is a list of interfaces or local addresses (paths: [wlan0,
// 10.0.0.1]); a name that is neither is refused.
type targets []string

func (t *targets) DecodeField(m *yamlcfg.Map, key string) {
	if !m.Has(key) {
		return
	}
	out := targets{}
	for _, s := range m.Strings(key) {
		if err := checkTarget(s); err != nil {
			m.Errorf(key, "%v", err)
			continue
		}
		out = append(out, s)
	}
	*t = out
}
