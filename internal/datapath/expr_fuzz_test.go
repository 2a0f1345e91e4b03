package datapath

import "testing"

// The chain expression compiler reads what users type: any text compiles
// or gives an error, never a panic, and what compiles fits a chain.
func FuzzCompile(f *testing.F) {
	f.Add("type(data-ack) and src(10.2.0.0/16)", "set_backup count")
	f.Add("tuple(src=10.1.0.1:40000, dst=10.1.0.2:5201) or not seq(0, 4294967296)", "clamp_rwnd(10mbit) mark(mark=7, classid=1:10)")
	f.Add("(((", "drop drop drop drop drop drop drop drop drop")
	f.Add("pair(::1, ::2)", "strip_add_addr")
	f.Fuzz(func(t *testing.T, sel, act string) {
		p, err := Compile(sel, act, map[string]bool{"stamp": true})
		if err != nil {
			return
		}
		if len(p.Steps) == 0 || len(p.Steps) > MaxSteps {
			t.Fatalf("%q / %q compiled to %d steps (1 to %d)", sel, act, len(p.Steps), MaxSteps)
		}
	})
}
