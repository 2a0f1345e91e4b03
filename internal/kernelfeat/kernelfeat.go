// Package kernelfeat says what the running kernel offers mpsteer, found by
// trying each thing once (loading a small program, attaching it in a
// throwaway network namespace, reading the sysctl names, asking generic
// netlink for the path manager's commands), never guessed from the
// version number: distributions backport, and configs differ. The version
// that introduced each thing is only said, so that a refusal can name the
// kernel a user needs.
//
// The daemon's config load calls Require for each feature a config uses;
// `mpsteer doctor` prints the whole report; the lab and the tests ask it
// before they build what needs a feature.
package kernelfeat

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Name names a feature (stable: doctor's JSON and the docs use it).
type Name string

// The features mpsteer uses.
const (
	BTF               Name = "btf"
	MPTCP             Name = "mptcp"
	PathManagerSysctl Name = "path-manager-sysctl"
	UserspacePM       Name = "userspace-pm"
	ListenerEvents    Name = "listener-events"
	TCX               Name = "tcx"
	Clsact            Name = "clsact"
	SockopsHeaderOpts Name = "sockops-header-options"
	SockopsPacingRate Name = "sockops-pacing-rate"
	SockopsRTOMax     Name = "sockops-rto-max"
	StructOpsCC       Name = "struct-ops-cc"
	UpdateSocketProto Name = "update-socket-protocol"
	BPFTrampolines    Name = "bpf-trampolines"
	KfuncRdonlyCast   Name = "kfunc-rdonly-cast"
	CoupledCC         Name = "coupled-cc"
)

// Info is what is known of a feature without probing: what it is for,
// the kernel version that introduced it, and what mpsteer does where it is
// missing.
type Info struct {
	Name Name
	// What says what mpsteer uses it for.
	What string
	// Since is the mainline version that introduced it.
	Since string
	// Fallback names the older mechanism that does the same job, if any
	// (a feature with a fallback is never refused: the fallback is used).
	Fallback Name
	// Alternatives, where there is no fallback in mpsteer, are what users
	// do instead (doctor prints them).
	Alternatives string
}

// Catalogue lists every feature in the order doctor prints them.
var Catalogue = []Info{
	{Name: MPTCP, Since: "5.6", What: "Multipath TCP itself (net.mptcp.enabled)"},
	{Name: BTF, Since: "5.4", What: "the kernel's BTF (/sys/kernel/btf/vmlinux), which the CO-RE BPF programs are relocated against"},
	{Name: PathManagerSysctl, Since: "6.15", Fallback: "pm-type-sysctl",
		What: "net.mptcp.path_manager (\"kernel\" or \"userspace\") to choose the path manager"},
	{Name: UserspacePM, Since: "5.19", What: "the userspace path manager's commands (announce, remove, subflow-create, subflow-destroy): subflows opened and closed by mpsteer"},
	{Name: ListenerEvents, Since: "6.2", What: "listener_created and listener_closed path-manager events"},
	// internal/datapath attaches chains on clsact where TCX is missing;
	// the spread policy and the lab's pinned spread attach through TCX
	// alone, and ask for it with RequireExactly.
	{Name: TCX, Since: "6.6", Fallback: Clsact,
		What: "TCX links for the datapath chains and the spread program (several programs in order on one hook; the spread program needs TCX itself)"},
	{Name: Clsact, Since: "4.5", What: "the clsact qdisc with a direct-action BPF filter (the older way to attach a TC program)"},
	{Name: KfuncRdonlyCast, Since: "6.2", Fallback: "probe-read-kernel",
		What: "the bpf_rdonly_cast kfunc, with which the datapath chains' programs read a subflow's MPTCP context"},
	{Name: SockopsHeaderOpts, Since: "5.10", What: "TCP header options written by sockops programs (the health option)"},
	{Name: SockopsPacingRate, Since: "4.13", What: "SO_MAX_PACING_RATE set from a sockops program (rate caps)"},
	{Name: SockopsRTOMax, Since: "6.15", What: "TCP_RTO_MAX_MS set from a sockops program (prefer's rto_max)",
		Alternatives: "prefer without rto_max: the kernel's own retransmission timeout stays (prefer's default cap of 1s is then not applied)"},
	{Name: StructOpsCC, Since: "6.4", What: "a congestion control registered as a BPF struct_ops link (rate_via: cc)",
		Alternatives: "rate_via: pacing (the default) or rate_via: rwnd"},
	{Name: CoupledCC, Since: "6.4", What: "the coupled congestion controls of policy coupled (LIA, BALIA): struct_ops links whose subflows find their connection through MPTCP's subflow context, with the kfuncs of 6.2"},
	{Name: BPFTrampolines, Since: "5.5", What: "BPF trampolines (fentry, fexit, fmod_ret), which need the kernel's function tracer"},
	{Name: UpdateSocketProto, Since: "6.6", What: "the update_socket_protocol hook (fmod_ret), which switches unmodified applications to MPTCP (mptcpize)",
		Alternatives: "systemd 257 or later: SocketProtocol=mptcp in a socket unit (its listening sockets); Go programs: GODEBUG=multipathtcp=1 (Go 1.21 on; dialers and listeners; Go 1.24 makes listeners MPTCP by default); any dynamically linked program: an LD_PRELOAD wrapper such as mptcpd's `mptcpize run CMD` (not static binaries such as Go's)"},
}

// InfoOf returns a feature's catalogue entry.
func InfoOf(n Name) (Info, bool) {
	for _, i := range Catalogue {
		if i.Name == n {
			return i, true
		}
	}
	return Info{}, false
}

// Feature is one probed feature, as doctor prints it.
type Feature struct {
	Name      Name   `json:"name"`
	Available bool   `json:"available"`
	Reason    string `json:"reason"`
	Since     string `json:"since"`
	// Fallback, when the feature is missing and mpsteer uses an older
	// mechanism instead: its name (FallbackAvailable says if it works).
	Fallback          Name   `json:"fallback,omitempty"`
	FallbackAvailable bool   `json:"fallback_available,omitempty"`
	Alternatives      string `json:"alternatives,omitempty"`
}

// Report is the running kernel's features.
type Report struct {
	Kernel   string    `json:"kernel"`
	Features []Feature `json:"features"`
}

// Get returns one feature of the report.
func (r *Report) Get(n Name) Feature {
	for _, f := range r.Features {
		if f.Name == n {
			return f
		}
	}
	return Feature{Name: n, Reason: "not probed"}
}

// Has reports whether a feature is available.
func (r *Report) Has(n Name) bool { return r.Get(n).Available }

// Usable reports whether the job of a feature can be done: the feature
// itself, or its fallback.
func (r *Report) Usable(n Name) bool {
	f := r.Get(n)
	return f.Available || (f.Fallback != "" && f.FallbackAvailable)
}

// MissingError is Require's refusal: it names the feature, the kernel
// version that introduced it and the config key that asked for it.
type MissingError struct {
	Feature   Feature
	ConfigKey string
	Kernel    string
}

func (e *MissingError) Error() string {
	info, _ := InfoOf(e.Feature.Name)
	s := fmt.Sprintf("%s needs %s (%s), which this kernel (%s) lacks: it arrived in Linux %s",
		e.ConfigKey, e.Feature.Name, info.What, e.Kernel, e.Feature.Since)
	if e.Feature.Reason != "" {
		s += "; " + e.Feature.Reason
	}
	if info.Alternatives != "" {
		s += "; instead: " + info.Alternatives
	}
	return s
}

// Require says whether the feature a config key asks for can be used:
// nil when it is available or its fallback is, otherwise a *MissingError
// naming the feature, the kernel version that introduced it and the key.
func Require(r *Report, n Name, configKey string) error {
	if r.Usable(n) {
		return nil
	}
	return &MissingError{Feature: r.Get(n), ConfigKey: configKey, Kernel: r.Kernel}
}

// RequireExactly is Require for a use that has no fallback of its own
// (a program that attaches only through TCX, say): the feature itself
// must be there.
func RequireExactly(r *Report, n Name, configKey string) error {
	if r.Has(n) {
		return nil
	}
	f := r.Get(n)
	f.Fallback, f.FallbackAvailable = "", false
	f.Reason, _, _ = strings.Cut(f.Reason, "; fallback ")
	return &MissingError{Feature: f, ConfigKey: configKey, Kernel: r.Kernel}
}

var (
	mu     sync.Mutex
	probed = map[Name]Feature{} // as its own probe found it, before fallbacks
	whole  *Report
)

// Probe returns the running kernel's report, probing each feature once per
// process (later calls return the same report). Most probes need
// CAP_NET_ADMIN and CAP_BPF (root has them): without them a feature is
// reported unavailable with that reason. They work in a throwaway network
// namespace, or, without CAP_SYS_ADMIN to make one (the daemon's unit),
// in the process's own, where they leave nothing behind.
func Probe() *Report {
	mu.Lock()
	defer mu.Unlock()
	if whole == nil {
		whole = probeLocked(nil)
	}
	return whole
}

// ProbeFeatures is Probe for the named features alone (and the features
// that are their fallbacks): a report of those, each probed once per
// process. The daemon asks for what its config uses, so that a config
// that uses nothing special costs no probe.
func ProbeFeatures(names ...Name) *Report {
	mu.Lock()
	defer mu.Unlock()
	if len(names) == 0 {
		return &Report{Kernel: KernelRelease()}
	}
	return probeLocked(names)
}

// KernelRelease is uname -r.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// probeLocked probes what is not probed yet of the named features (nil:
// all) and their fallbacks, and returns their report (under mu).
func probeLocked(names []Name) *Report {
	want := map[Name]bool{}
	for _, n := range names {
		want[n] = true
		if info, ok := InfoOf(n); ok && info.Fallback != "" {
			if _, isFeature := InfoOf(info.Fallback); isFeature {
				want[info.Fallback] = true
			}
		}
	}
	wanted := func(n Name) bool { return names == nil || want[n] }
	var todo []Info
	envNeeded := false
	for _, info := range Catalogue {
		if _, done := probed[info.Name]; wanted(info.Name) && !done {
			todo = append(todo, info)
			envNeeded = envNeeded || needsEnv[info.Name]
		}
	}
	if len(todo) > 0 {
		var env *probeEnv
		var err error
		if envNeeded {
			env, err = newProbeEnv()
			if env != nil {
				defer env.close()
			}
		}
		for _, info := range todo {
			probed[info.Name] = probeOne(info, env, err)
		}
	}
	r := &Report{Kernel: KernelRelease()}
	for _, info := range Catalogue {
		if wanted(info.Name) {
			r.Features = append(r.Features, probed[info.Name])
		}
	}
	// Fallbacks, once their own probes ran.
	for i, f := range r.Features {
		info, _ := InfoOf(f.Name)
		if f.Available || info.Fallback == "" {
			continue
		}
		r.Features[i].Fallback = info.Fallback
		if fb, ok := fallbackProbes[info.Fallback]; ok {
			ok2, why := fb(r)
			r.Features[i].FallbackAvailable = ok2
			r.Features[i].Reason += "; fallback " + string(info.Fallback) + ": " + why
		} else {
			fbf := r.Get(info.Fallback)
			r.Features[i].FallbackAvailable = fbf.Available
			r.Features[i].Reason += "; fallback " + string(info.Fallback) + ": " + fbf.Reason
		}
	}
	return r
}

// probeOne probes one feature; envErr is why there is no environment for
// the probes that need one.
func probeOne(info Info, env *probeEnv, envErr error) Feature {
	f := Feature{Name: info.Name, Since: info.Since, Alternatives: info.Alternatives}
	var perr error
	switch {
	case needsEnv[info.Name] && envErr != nil:
		perr = fmt.Errorf("not probed: %v", needsPrivilege(envErr))
	case needsEnv[info.Name] && env == nil:
		perr = errors.New("not probed: no environment to probe in")
	default:
		perr = probes[info.Name](env)
	}
	if perr != nil && os.Geteuid() != 0 && (errors.Is(perr, unix.EPERM) || strings.Contains(perr.Error(), "operation not permitted")) {
		perr = fmt.Errorf("%v (not root: run it as root, or with CAP_NET_ADMIN and CAP_BPF)", perr)
	}
	f.Available = perr == nil
	if perr != nil {
		f.Reason = perr.Error()
	} else {
		f.Reason = "ok"
		f.Alternatives = ""
	}
	return f
}

// Table renders the report as text: one line per feature.
func (r *Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kernel %s\n", r.Kernel)
	w := 0
	for _, f := range r.Features {
		w = max(w, len(f.Name))
	}
	for _, f := range r.Features {
		state := "yes"
		switch {
		case !f.Available && f.FallbackAvailable:
			state = "fallback"
		case !f.Available:
			state = "no"
		}
		fmt.Fprintf(&b, "%-*s  %-8s  since %-5s  %s\n", w, f.Name, state, f.Since, f.Reason)
		if f.Alternatives != "" {
			fmt.Fprintf(&b, "%*s  instead: %s\n", w, "", f.Alternatives)
		}
	}
	return b.String()
}
