package kernelfeat_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

func TestRequireNamesFeatureVersionAndKey(t *testing.T) {
	r := &kernelfeat.Report{Kernel: "6.1.0-50-amd64", Features: []kernelfeat.Feature{
		{Name: kernelfeat.UpdateSocketProto, Since: "6.6", Reason: "no update_socket_protocol"},
		{Name: kernelfeat.TCX, Since: "6.6", Reason: "tcx not supported", Fallback: kernelfeat.Clsact, FallbackAvailable: true},
		{Name: kernelfeat.ListenerEvents, Available: true, Since: "6.2", Reason: "ok"},
	}}
	err := kernelfeat.Require(r, kernelfeat.UpdateSocketProto, "mptcpize")
	var me *kernelfeat.MissingError
	if !errors.As(err, &me) {
		t.Fatalf("Require: %v, want a *MissingError", err)
	}
	for _, want := range []string{"mptcpize needs update-socket-protocol", "this kernel (6.1.0-50-amd64)", "Linux 6.6", "SocketProtocol=mptcp", "GODEBUG=multipathtcp=1", "LD_PRELOAD"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// A feature with a working fallback is not refused; without it, it is.
	if err := kernelfeat.Require(r, kernelfeat.TCX, "chains"); err != nil {
		t.Errorf("TCX with clsact: %v", err)
	}
	if err := kernelfeat.RequireExactly(r, kernelfeat.TCX, "variant key spread: pinned"); err == nil || strings.Contains(err.Error(), "fallback") ||
		!strings.Contains(err.Error(), "variant key spread: pinned needs tcx") || !strings.Contains(err.Error(), "Linux 6.6") {
		t.Errorf("RequireExactly(TCX): %v", err)
	}
	if err := kernelfeat.Require(r, kernelfeat.ListenerEvents, "x"); err != nil {
		t.Errorf("an available feature: %v", err)
	}
	if f := r.Get("nonesuch"); f.Available || f.Reason != "not probed" {
		t.Errorf("unknown feature: %+v", f)
	}
}

// doctor's table: one line per feature, a fallback said as such, and the
// other ways where a feature without a fallback is missing.
func TestTable(t *testing.T) {
	r := &kernelfeat.Report{Kernel: "6.1.0-50-amd64", Features: []kernelfeat.Feature{
		{Name: kernelfeat.TCX, Since: "6.6", Reason: "tcx not supported; fallback clsact: ok", Fallback: kernelfeat.Clsact, FallbackAvailable: true},
		{Name: kernelfeat.UpdateSocketProto, Since: "6.6", Reason: "no hook", Alternatives: "systemd: SocketProtocol=mptcp"},
		{Name: kernelfeat.BTF, Available: true, Since: "5.4", Reason: "ok"},
	}}
	want := "kernel 6.1.0-50-amd64\n" +
		"tcx                     fallback  since 6.6    tcx not supported; fallback clsact: ok\n" +
		"update-socket-protocol  no        since 6.6    no hook\n" +
		"                        instead: systemd: SocketProtocol=mptcp\n" +
		"btf                     yes       since 5.4    ok\n"
	if got := r.Table(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestCatalogueIsComplete(t *testing.T) {
	seen := map[kernelfeat.Name]bool{}
	for _, i := range kernelfeat.Catalogue {
		if seen[i.Name] || i.Since == "" || i.What == "" {
			t.Errorf("catalogue entry %+v: duplicate, or no version or purpose", i)
		}
		seen[i.Name] = true
	}
}

// The probes on this machine's kernel, checked against what can be seen
// without them, and done once.
func TestProbeOnThisKernel(t *testing.T) {
	testutil.RequireRoot(t, "probing BPF and netlink features")
	r := kernelfeat.Probe()
	if r != kernelfeat.Probe() {
		t.Error("a second Probe probed again")
	}
	if len(r.Features) != len(kernelfeat.Catalogue) || r.Kernel != kernelfeat.KernelRelease() {
		t.Fatalf("report %+v", r)
	}
	for _, f := range r.Features {
		if f.Reason == "" || strings.HasPrefix(f.Reason, "not probed") {
			t.Errorf("%s: %q", f.Name, f.Reason)
		}
	}
	_, err := os.Stat("/proc/sys/net/mptcp/path_manager")
	if r.Has(kernelfeat.PathManagerSysctl) != (err == nil) {
		t.Errorf("path-manager-sysctl %v, but stat says %v", r.Has(kernelfeat.PathManagerSysctl), err)
	}
	if !r.Has(kernelfeat.PathManagerSysctl) && !r.Usable(kernelfeat.PathManagerSysctl) {
		t.Errorf("neither path_manager nor pm_type: %+v", r.Get(kernelfeat.PathManagerSysctl))
	}
	// Every kernel the project runs on has these, or a fallback.
	for _, n := range []kernelfeat.Name{kernelfeat.MPTCP, kernelfeat.BTF, kernelfeat.UserspacePM, kernelfeat.Clsact, kernelfeat.SockopsPacingRate} {
		if !r.Usable(n) {
			t.Errorf("%s: %+v", n, r.Get(n))
		}
	}
	// The fmod_ret hook is a BPF trampoline: without them it cannot load.
	if !r.Has(kernelfeat.BPFTrampolines) && r.Has(kernelfeat.UpdateSocketProto) {
		t.Error("update_socket_protocol available without BPF trampolines")
	}
	// The throwaway namespace is gone.
	if left, _ := netnsutil.List("mpsteer-probe-"); len(left) > 0 {
		for _, n := range left {
			if strings.HasPrefix(n, fmt.Sprintf("mpsteer-probe-%d-", os.Getpid())) {
				t.Errorf("probe namespace %s left behind", n)
			}
		}
	}
}

// mpsteer doctor --json, as scripts read it.
func TestDoctorJSON(t *testing.T) {
	testutil.RequireRoot(t, "probing BPF and netlink features")
	out, err := exec.Command(testutil.Binary(t), "doctor", "--json").Output()
	if err != nil {
		t.Fatalf("doctor --json: %v: %s", err, out)
	}
	var got struct {
		Kernel   string `json:"kernel"`
		Features []struct {
			Name      string `json:"name"`
			Available *bool  `json:"available"`
			Reason    string `json:"reason"`
		} `json:"features"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Kernel != kernelfeat.KernelRelease() || len(got.Features) != len(kernelfeat.Catalogue) {
		t.Fatalf("doctor --json: %s", out)
	}
	for _, f := range got.Features {
		if f.Name == "" || f.Available == nil || f.Reason == "" {
			t.Errorf("feature %+v lacks name, available or reason", f)
		}
	}
}

// ProbeFeatures reports the features asked for and their fallbacks, as
// the whole probe finds them.
func TestProbeFeaturesReportsWhatItWasAskedFor(t *testing.T) {
	testutil.RequireRoot(t, "probing BPF and netlink features")
	if r := kernelfeat.ProbeFeatures(); len(r.Features) != 0 || r.Kernel != kernelfeat.KernelRelease() {
		t.Fatalf("no features asked for: %+v", r)
	}
	r := kernelfeat.ProbeFeatures(kernelfeat.TCX, kernelfeat.BTF)
	var names []kernelfeat.Name
	for _, f := range r.Features {
		names = append(names, f.Name)
	}
	// In the catalogue's order; clsact is TCX's fallback.
	if fmt.Sprint(names) != fmt.Sprint([]kernelfeat.Name{kernelfeat.BTF, kernelfeat.TCX, kernelfeat.Clsact}) {
		t.Fatalf("features %v", names)
	}
	all := kernelfeat.Probe()
	for _, f := range r.Features {
		if g := all.Get(f.Name); g != f {
			t.Errorf("%s: %+v alone, %+v in the whole probe", f.Name, f, g)
		}
	}
}
