package reliability

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
	"mpsteer/internal/testutil"
)

// killCase: a policy under one backup mode.
type killCase struct {
	name      string
	userspace bool   // userspace path manager: backup per subflow
	policies  string // YAML list items
	persist   bool   // chains' state in bpffs: the next daemon re-adopts it
}

func killCases() []killCase {
	kernel := []killCase{
		{name: "prefer", userspace: false, policies: "{name: prefer, paths: [veth1]}"},
		{name: "dynthresh", userspace: false, policies: "{name: dynthresh}"},
		{name: "ecf", userspace: false, policies: "{name: ecf}"},
		{name: "limit", userspace: false, policies: "{name: limit, rates: {veth2: 5mbit}}"},
		{name: "backup", userspace: false, policies: "{name: backup, paths: [veth2]}"},
		{name: "ramptcp", userspace: false, policies: "{name: ramptcp}"},
	}
	fm := "{name: fullmesh, interfaces: [veth1, veth2]}"
	user := []killCase{
		{name: "fullmesh+prefer", userspace: true, policies: fm + ", {name: prefer, paths: [veth1]}"},
		{name: "fullmesh+dynthresh", userspace: true, policies: fm + ", {name: dynthresh}"},
		{name: "fullmesh+ecf", userspace: true, policies: fm + ", {name: ecf}"},
		{name: "fullmesh+limit", userspace: true, policies: fm + ", {name: limit, rates: {veth2: 5mbit}}"},
		{name: "fullmesh+backup", userspace: true, policies: fm + ", {name: backup, paths: [veth2]}"},
		{name: "fullmesh+ramptcp", userspace: true, policies: fm + ", {name: ramptcp}"},
		{name: "incremental", userspace: true, policies: "{name: incremental, steps: [64KiB], interfaces: [veth1, veth2]}"},
	}
	persist := killCase{name: "prefer+persist", policies: "{name: prefer, paths: [veth1]}", persist: true}
	if !Soak() {
		return []killCase{kernel[0], user[0], persist}
	}
	return append(append(kernel, user...), persist)
}

// TestKill9MidTransfer kills the daemon with SIGKILL while a checked
// upload runs, under each policy and each backup mode: the upload keeps
// flowing and completes intact, the chain the daemon had attached is gone
// with it, and the next daemon restores the endpoints it left.
func TestKill9MidTransfer(t *testing.T) {
	testutil.RequireLab(t)
	reps := pick(1, 3)
	start := time.Now()
	tried, survived := 0, 0
	var lost []string
	perCase := map[string]any{}
	var flowAfter []float64
	leftBackup := 0
	for _, kc := range killCases() {
		for rep := 0; rep < reps; rep++ {
			t.Run(fmt.Sprintf("%s/%d", kc.name, rep+1), func(t *testing.T) {
				tried++
				ok, why, flow, left := killOnce(t, kc)
				flowAfter = append(flowAfter, float64(flow))
				leftBackup += left
				perCase[kc.name] = fmt.Sprintf("%d/%d", survivedOf(perCase[kc.name], ok), rep+1)
				if !ok {
					lost = append(lost, kc.name+": "+why)
					t.Error(why)
					return
				}
				survived++
			})
		}
	}
	if tried == 0 {
		return
	}
	minFlow := flowAfter[0]
	for _, f := range flowAfter {
		minFlow = min(minFlow, f)
	}
	l := lostText(lost)
	record(t, Record{Case: "kill9-mid-transfer", Fault: "daemon killed (SIGKILL) mid-transfer, each policy × backup mode (endpoint: kernel PM, subflow: userspace PM), a chain attached (gone with the daemon; with persist: its state re-adopted by the next)",
		Tried: tried, Survived: survived, Lost: l, Measured: map[string]any{
			"min_bytes_received_in_1s_after_kill":               minFlow,
			"subflow_flags_left_backup_after_restart_userspace": leftBackup,
			"per_case_survived":                                 perCase,
		}}, start)
}

func survivedOf(prev any, ok bool) int {
	n := 0
	if s, _ := prev.(string); s != "" {
		fmt.Sscanf(s, "%d/", &n)
	}
	if ok {
		n++
	}
	return n
}

// killOnce runs one kill; ok when everything held.
func killOnce(t *testing.T, kc killCase) (ok bool, why string, flow int64, leftBackup int) {
	w := newWorld(t, 2, kc.userspace)
	before := w.endpoints(t)
	tr := startTransfer(t, w, 40e6)
	chain := "chains:\n  - {id: 1, dev: veth1, hook: egress, select: 'dst(10.0.0.0/8)', act: count}\n"
	if kc.persist {
		dir := t.TempDir()
		if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
			testutil.Unavailable(t, fmt.Sprintf("cannot mount a bpffs: %v", err))
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
		chain = "persist: " + dir + "/state\n" + chain
	}
	d := testutil.StartDaemon(t, w.h.Client, "interval: 100ms\npolicies: ["+kc.policies+"]\n"+chain)
	// Killed mid-transfer: the daemon steers it (it shows the connection
	// with two subflows or more, its chain has counted packets) and has
	// had rounds to act on it.
	steering(t, d, tr, 2)
	var chainsBefore []datapath.ChainStatus
	if err := testutil.WaitFor(10*time.Second, func() error {
		if err := d.Client.Do("GET", "/v1/chains", nil, &chainsBefore); err != nil {
			return err
		}
		if len(chainsBefore) != 1 || chainsBefore[0].Seen == 0 {
			return fmt.Errorf("want one chain that counted packets: %+v", chainsBefore)
		}
		return nil
	}); err != nil {
		return false, "chains before the kill: " + err.Error(), 0, 0
	}
	d.WaitRounds(t, 5)
	links := linkIDs(t, pid(d))
	if len(links) == 0 {
		return false, "the daemon holds no BPF link before the kill (the chain's)", 0, 0
	}
	if err := d.Client.Do("GET", "/v1/chains", nil, &chainsBefore); err != nil || len(chainsBefore) != 1 {
		return false, fmt.Sprintf("chains before the kill: %v %v", chainsBefore, err), 0, 0
	}
	d.Stop(syscall.SIGKILL)
	flow = tr.flowing(time.Second)
	var probs []string
	if flow == 0 && !tr.progress(10*time.Second) {
		probs = append(probs, "no byte arrived in the 11 s after the kill")
	}
	if n := liveLinks(links); n != 0 {
		probs = append(probs, fmt.Sprintf("%d of the killed daemon's %d BPF links still exist", n, len(links)))
	}
	// The next daemon: restores what the killed one left.
	// With persist, it declares the same chain and re-adopts its state.
	next := "policies: []\n"
	if kc.persist {
		next += chain
	}
	d2 := testutil.StartDaemon(t, w.h.Client, next)
	var chains []datapath.ChainStatus
	err := d2.Client.Do("GET", "/v1/chains", nil, &chains)
	switch {
	case err != nil:
		probs = append(probs, "next daemon's chains: "+err.Error())
	case !kc.persist && len(chains) != 0:
		probs = append(probs, fmt.Sprintf("next daemon lists chains it was not given: %+v", chains))
	case kc.persist && (len(chains) != 1 || chains[0].ID != chainsBefore[0].ID || chains[0].Seen < chainsBefore[0].Seen):
		probs = append(probs, fmt.Sprintf("next daemon did not re-adopt the chain's state: %+v, before the kill %+v", chains, chainsBefore))
	}
	if !kc.userspace {
		after := w.endpoints(t)
		if fmt.Sprint(after) != fmt.Sprint(before) {
			probs = append(probs, fmt.Sprintf("endpoints after restart %v, want %v", after, before))
		}
	} else {
		// Under the userspace path manager a killed daemon's per-subflow
		// flags stay on the connections (documented); count them.
		if st2, err := d2.Client.Status(); err == nil {
			leftBackup = countBackup(st2)
		}
	}
	if !tr.progress(10 * time.Second) {
		probs = append(probs, "no byte arrived under the next daemon")
	}
	d2.Stop(syscall.SIGTERM)
	res := tr.stop()
	if !res.intact() {
		probs = append(probs, "transfer: "+res.String())
	}
	if !res.MPTCP {
		probs = append(probs, "the connection fell back to TCP")
	}
	if len(probs) > 0 {
		return false, strings.Join(probs, "; "), flow, leftBackup
	}
	return true, "", flow, leftBackup
}

func countBackup(st *api.Status) int {
	n := 0
	for _, c := range st.Connections {
		for _, sf := range c.Subflows {
			if sf.BackupLocal {
				n++
			}
		}
	}
	return n
}
