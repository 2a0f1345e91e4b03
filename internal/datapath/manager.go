package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"mpsteer/internal/bpfutil"
)

// Hook is where a chain runs.
type Hook string

const (
	Ingress Hook = "ingress"
	Egress  Hook = "egress"
)

// ChainSpec describes a chain as a user writes it.
type ChainSpec struct {
	ID     uint32 `json:"id,omitempty"` // 0: the manager picks one
	Dev    string `json:"dev"`
	Hook   Hook   `json:"hook"`
	Select string `json:"select"`
	Act    string `json:"act"`
	// Before/After place the chain before or after another chain on the
	// same hook (default: last).
	Before uint32 `json:"before,omitempty"`
	After  uint32 `json:"after,omitempty"`
}

// ChainStatus is a chain and its counters.
type ChainStatus struct {
	ChainSpec
	Ifindex  int         `json:"ifindex"`
	Steps    []StepCount `json:"steps"`
	Seen     uint64      `json:"seen_packets"`
	Selected uint64      `json:"selected_packets"`
	Bytes    uint64      `json:"selected_bytes"`
	Modified uint64      `json:"modified_packets"`
	Dropped  uint64      `json:"dropped_packets"`
	Skipped  uint64      `json:"skipped_packets"`
	Errors   uint64      `json:"errors"`
	FirstNs  uint64      `json:"first_packet_ktime_ns,omitempty"`
	// CPUTimeNs is the kernel's count of the time spent in the chain
	// (entry and every step), kept while BPF run-time statistics are on
	// (sysctl kernel.bpf_stats_enabled=1, or a benchmark holding them).
	CPUTimeNs uint64     `json:"cpu_time_ns,omitempty"`
	Withheld  []Withheld `json:"withheld_add_addr,omitempty"`
}

// StepCount is one step with its count actor's counters.
type StepCount struct {
	Text    string `json:"step"`
	Program string `json:"program"`
	Packets uint64 `json:"packets,omitempty"`
	Bytes   uint64 `json:"bytes,omitempty"`
}

// Withheld is an ADD_ADDR option strip_add_addr kept back.
type Withheld struct {
	AddrID   uint32 `json:"addr_id"`
	Subflow  string `json:"subflow"`
	Option   string `json:"option_hex"`
	Released bool   `json:"released"`
}

// Loaded actors take slots in mpsteer_steps from userBase on (below it:
// mpsteer_resume, at resumeIndex).
const userBase = 32

type chain struct {
	spec    ChainSpec
	prog    *Program
	ifindex int
	l2      uint32
	slot    uint32        // active descriptor slot
	entry   *ebpf.Program // the chain's program (the one attached)
	cur     *chainProg    // the same, with its pause switch
	link    link.Link
	// runtime of the chain's earlier programs (replaced, moved), so
	// that CPUTimeNs covers the chain's whole life
	runtimeBase uint64
	// earlier programs of a chain that is not attached (AddDetached):
	// their holders may still run them; closed with the chain
	retired []*ebpf.Program
}

// sharedObjects are what every chain's program shares: the maps, and
// mpsteer_resume, where loaded actors come back.
type sharedObjects struct {
	stepsMaps
	MpsteerResume *ebpf.Program `ebpf:"mpsteer_resume"`
}

func (o *sharedObjects) Close() error {
	return errors.Join(o.stepsMaps.Close(), o.MpsteerResume.Close())
}

// Manager owns the shared maps, the loaded actors and the chains (one
// program each) of one network namespace. Closing it detaches every
// chain: packets flow as if mpsteer were not there (fail open).
type Manager struct {
	mu        sync.Mutex
	spec      *ebpf.CollectionSpec
	chainSpec *ebpf.CollectionSpec // the chain program and what it uses
	btfCache  *btf.Cache           // the kernel's types, for CO-RE
	objs      sharedObjects
	index     map[string]uint32 // "user:NAME" -> slot in mpsteer_steps
	user      map[string]*ebpf.Program
	chains    map[uint32]*chain
	pinned    bool
	sockCache uint32 // the chains' sock_cache
}

// Options tune a Manager.
type Options struct {
	// PinDir, when set, keeps the chains' state (withheld ADD_ADDR
	// options, counters, pending releases) in maps pinned there, on a
	// bpffs, so that it outlives the process: a restarted daemon finds
	// it again under the same chain ids. Attachments are never pinned:
	// when the process ends the chains come off the devices (fail open).
	PinDir string
	// NoSocketCache makes the actors that read the packet's socket
	// (clamp_rwnd, set_backup) look it up for every packet instead of
	// keeping what they read per CPU for the rest of a jiffy: what a
	// packet of a new flow costs (the benchmark's cold figures).
	NoSocketCache bool
}

// persistentMaps hold state keyed by chain id; the others (descriptors,
// program array) are rebuilt by every process.
var persistentMaps = []string{"mpsteer_withheld", "mpsteer_stats", "mpsteer_step_count", "mpsteer_release_pending"}

// NewManager loads the shared maps, fresh.
func NewManager() (*Manager, error) { return NewManagerWith(Options{}) }

// NewManagerWith loads the shared maps, reusing pinned ones when asked
// to. Chains' programs are loaded as chains are added.
func NewManagerWith(o Options) (*Manager, error) {
	spec, err := loadSteps()
	if err != nil {
		return nil, err
	}
	chainSpec := spec.Copy()
	for name := range chainSpec.Programs {
		if name != "mpsteer_chain" {
			delete(chainSpec.Programs, name)
		}
	}
	m := &Manager{spec: spec, chainSpec: chainSpec, index: map[string]uint32{}, user: map[string]*ebpf.Program{}, chains: map[uint32]*chain{}, sockCache: 1}
	if o.NoSocketCache {
		m.sockCache = 0
	}
	var opts *ebpf.CollectionOptions
	if o.PinDir != "" {
		if err := ensureBPFFS(o.PinDir); err != nil {
			return nil, err
		}
		for _, name := range persistentMaps {
			spec.Maps[name].Pinning = ebpf.PinByName
		}
		opts = &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: o.PinDir}}
		m.pinned = true
	}
	if err := spec.LoadAndAssign(&m.objs, opts); err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("the maps pinned in %s are from another version of mpsteer; remove them (rm %s/mpsteer_*) to start afresh: %w", o.PinDir, o.PinDir, err)
		}
		return nil, fmt.Errorf("load the datapath maps: %w", bpfutil.VerifierDetail(err))
	}
	if err := m.objs.MpsteerSteps.Put(uint32(resumeIndex), m.objs.MpsteerResume); err != nil {
		m.objs.Close()
		return nil, fmt.Errorf("program array: %w", err)
	}
	return m, nil
}

// Close detaches every chain and unloads everything. With pinned maps the
// chains' state stays for the next process.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs error
	for id, c := range m.chains {
		if m.pinned {
			errs = errors.Join(errs, m.detach(c))
			delete(m.chains, id)
			continue
		}
		errs = errors.Join(errs, m.del(id))
	}
	for _, p := range m.user {
		p.Close()
	}
	return errors.Join(errs, m.objs.Close())
}

// Actors reports the loaded (user) actors.
func (m *Manager) Actors() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for k := range m.user {
		out[k] = true
	}
	return out
}

// l2len is the length of the link-layer header in front of IP on dev.
func l2len(l netlink.Link) (uint32, error) {
	switch l.Attrs().EncapType {
	case "ether", "loopback":
		return 14, nil
	case "none", "": // TUN and other IP devices
		return 0, nil
	}
	return 0, fmt.Errorf("device %s has link type %q; chains run on Ethernet-like and IP (TUN) devices", l.Attrs().Name, l.Attrs().EncapType)
}

// Add checks, compiles and attaches a chain. On any error nothing is
// left attached or written.
func (m *Manager) Add(spec ChainSpec) (*ChainStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if spec.Hook != Ingress && spec.Hook != Egress {
		return nil, fmt.Errorf("--hook %q is not valid (valid: ingress, egress)", spec.Hook)
	}
	prog, err := Compile(spec.Select, spec.Act, m.userNames())
	if err != nil {
		return nil, err
	}
	l, err := netlink.LinkByName(spec.Dev)
	if err != nil {
		return nil, fmt.Errorf("--dev %q: no such device in this network namespace", spec.Dev)
	}
	l2, err := l2len(l)
	if err != nil {
		return nil, err
	}
	if spec.ID == 0 {
		for id := uint32(1); id < MaxChains; id++ {
			if _, used := m.chains[id]; !used {
				spec.ID = id
				break
			}
		}
		if spec.ID == 0 {
			return nil, fmt.Errorf("all %d chains are in use", MaxChains-1)
		}
	} else if spec.ID >= MaxChains {
		return nil, fmt.Errorf("chain id %d is out of range (1 to %d)", spec.ID, MaxChains-1)
	} else if _, used := m.chains[spec.ID]; used {
		return nil, fmt.Errorf("chain %d exists already", spec.ID)
	}
	anchor := link.Tail()
	for _, ref := range []struct {
		id     uint32
		before bool
	}{{spec.Before, true}, {spec.After, false}} {
		if ref.id == 0 {
			continue
		}
		other, ok := m.chains[ref.id]
		if !ok || other.ifindex != l.Attrs().Index || other.spec.Hook != spec.Hook {
			return nil, fmt.Errorf("chain %d is not on %s %s: cannot place chain %d next to it", ref.id, spec.Dev, spec.Hook, spec.ID)
		}
		if ref.before {
			anchor = link.BeforeLink(other.link)
		} else {
			anchor = link.AfterLink(other.link)
		}
	}
	c := &chain{spec: spec, prog: prog, ifindex: l.Attrs().Index, l2: l2, slot: spec.ID * 2}
	if err := m.prepare(c, c.slot, prog); err != nil {
		return nil, err
	}
	attach := ebpf.AttachTCXIngress
	if spec.Hook == Egress {
		attach = ebpf.AttachTCXEgress
	}
	c.link, err = link.AttachTCX(link.TCXOptions{Interface: c.ifindex, Program: c.entry, Attach: attach, Anchor: anchor})
	if err != nil {
		m.unprepare(c, c.slot)
		return nil, fmt.Errorf("attach to %s %s: %w", spec.Dev, spec.Hook, err)
	}
	if !m.pinned { // pinned counters carry on from the previous process
		m.resetStats(spec.ID)
	}
	m.chains[spec.ID] = c
	return m.status(c), nil
}

// MaxChains bounds chain ids (mirrors MPSTEER_MAX_CHAINS).
const MaxChains = 256

func (m *Manager) userNames() map[string]bool {
	out := map[string]bool{}
	for k := range m.user {
		out[k] = true
	}
	return out
}

// prepare loads the program of chain c for descriptor slot `slot` (the
// verifier checks the whole chain) into c.entry, and writes what loaded
// actors read: the descriptor, and the program in mpsteer_resumes for
// them to come back to. Nothing the running chain uses is touched.
func (m *Manager) prepare(c *chain, slot uint32, prog *Program) error {
	p, err := m.loadChain(c.spec.ID, slot, c.l2, prog, false)
	if err != nil {
		return err
	}
	if err := m.writeDescriptor(c.spec.ID, prog, slot, c.l2); err != nil {
		p.prog.Close()
		return err
	}
	if p.user {
		if err := m.objs.MpsteerResumes.Put(slot, p.prog); err != nil {
			p.prog.Close()
			return fmt.Errorf("resume array: %w", err)
		}
	} else {
		m.objs.MpsteerResumes.Delete(slot)
	}
	c.entry, c.cur = p.prog, p
	return nil
}

// unprepare undoes prepare after a failure.
func (m *Manager) unprepare(c *chain, slot uint32) {
	m.objs.MpsteerResumes.Delete(slot)
	if c.entry != nil {
		c.entry.Close()
		c.entry, c.cur = nil, nil
	}
}

// writeDescriptor writes the chain's descriptor: loaded actors read their
// arguments from it (mpsteer_this) and where to go next (mpsteer_next).
// Built-in steps are reached through mpsteer_resume.
func (m *Manager) writeDescriptor(id uint32, prog *Program, slot uint32, l2 uint32) error {
	var d stepsMpsteerChain
	d.Id, d.N, d.FirstActor, d.L2len = id, uint32(len(prog.Steps)), uint32(prog.FirstActor), l2
	for i, st := range prog.Steps {
		idx := uint32(resumeIndex)
		if name, user := strings.CutPrefix(st.Prog, "user:"); user {
			var ok bool
			if idx, ok = m.index["user:"+name]; !ok {
				return fmt.Errorf("step %q: program %s is not loaded", st.Text, st.Prog)
			}
		}
		d.Steps[i].Prog = uint16(idx)
		d.Steps[i].OnMatch, d.Steps[i].OnMiss, d.Steps[i].Flags = st.OnMatch, st.OnMiss, st.Flags
		d.Steps[i].Args = st.Args
	}
	return m.objs.MpsteerChains.Put(slot, &d)
}

func (m *Manager) sharedMaps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		"mpsteer_steps": m.objs.MpsteerSteps, "mpsteer_chains": m.objs.MpsteerChains,
		"mpsteer_stats": m.objs.MpsteerStats, "mpsteer_step_count": m.objs.MpsteerStepCount,
		"mpsteer_withheld":        m.objs.MpsteerWithheld,
		"mpsteer_release_pending": m.objs.MpsteerReleasePending, "mpsteer_resumes": m.objs.MpsteerResumes,
	}
}

// runtime is the kernel's count of the time spent in the chain so far.
func (c *chain) runtime() uint64 {
	if c.entry == nil {
		return c.runtimeBase
	}
	if ps, err := c.entry.Stats(); err == nil {
		return c.runtimeBase + uint64(ps.Runtime)
	}
	return c.runtimeBase
}

// retire takes the chain's current program out of service.
func (c *chain) retire() {
	if c.entry == nil {
		return
	}
	c.runtimeBase = c.runtime()
	if c.link == nil {
		c.retired = append(c.retired, c.entry)
	} else {
		c.entry.Close()
	}
	c.entry, c.cur = nil, nil
}

// zeroStepCounts clears the per-step counters of one descriptor slot.
func (m *Manager) zeroStepCounts(slot uint32) {
	zero := make([][2]uint64, ebpf.MustPossibleCPU())
	for i := uint32(0); i < MaxSteps; i++ {
		m.objs.MpsteerStepCount.Put(slot*MaxSteps+i, zero)
	}
}

func (m *Manager) resetStats(id uint32) {
	zero := make([]stepsMpsteerStats, ebpf.MustPossibleCPU())
	m.objs.MpsteerStats.Put(id, zero)
	for slot := id * 2; slot < id*2+2; slot++ {
		m.zeroStepCounts(slot)
	}
}

// Del detaches and forgets a chain.
func (m *Manager) Del(id uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.del(id)
}

func (m *Manager) del(id uint32) error {
	c, ok := m.chains[id]
	if !ok {
		return fmt.Errorf("no chain %d", id)
	}
	if err := m.detach(c); err != nil {
		// Inert (it runs no step) but still attached: keep it, so that
		// a retry or Close can take it off.
		return fmt.Errorf("detach chain %d from %s %s: %w", id, c.spec.Dev, c.spec.Hook, err)
	}
	// Forget its counters and what it withheld.
	m.resetStats(id)
	for slot := id * 2; slot < id*2+2; slot++ {
		m.objs.MpsteerResumes.Delete(slot)
	}
	m.objs.MpsteerReleasePending.Put(id, uint32(0))
	var k stepsWithheldKey
	var v stepsWithheldVal
	it := m.objs.MpsteerWithheld.Iterate()
	var drop []stepsWithheldKey
	for it.Next(&k, &v) {
		if k.Chain == id {
			drop = append(drop, k)
		}
	}
	for _, k := range drop {
		m.objs.MpsteerWithheld.Delete(&k)
	}
	delete(m.chains, id)
	return nil
}

// detach makes a chain inert, takes it off its device and unloads its
// program; it can be called again after a failure.
func (m *Manager) detach(c *chain) error {
	if c.cur != nil {
		c.cur.pause(true)
	}
	if c.link != nil {
		if err := c.link.Close(); err != nil {
			return err
		}
		c.link = nil
	}
	if c.entry != nil {
		c.entry.Close()
		c.entry, c.cur = nil, nil
	}
	for _, p := range c.retired {
		p.Close()
	}
	c.retired = nil
	return nil
}

// Replace swaps a chain's selectors and actors in place: the new chain is
// built and verified as a program of its own (for the chain's other
// descriptor slot), then replaces the old one in the chain's TCX link in
// one step (bpf_link_update), so each packet runs the old chain or the new
// one, never a mix. Counters, withheld options and the chain's place on
// the hook stay.
func (m *Manager) Replace(id uint32, selectExpr, actExpr string) (*ChainStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.replace(id, selectExpr, actExpr)
}

func (m *Manager) replace(id uint32, selectExpr, actExpr string) (*ChainStatus, error) {
	c, ok := m.chains[id]
	if !ok {
		return nil, fmt.Errorf("no chain %d", id)
	}
	prog, err := Compile(selectExpr, actExpr, m.userNames())
	if err != nil {
		return nil, err
	}
	l2 := uint32(14)
	if c.ifindex != 0 {
		l, err := netlink.LinkByIndex(c.ifindex)
		if err != nil {
			return nil, err
		}
		if l2, err = l2len(l); err != nil {
			return nil, err
		}
	}
	next := c.slot ^ 1
	// The idle slot's step counters start from zero for the new chain.
	m.zeroStepCounts(next)
	nc := &chain{spec: c.spec, l2: l2}
	if err := m.prepare(nc, next, prog); err != nil {
		return nil, err
	}
	if c.link != nil {
		if err := c.link.Update(nc.entry); err != nil {
			nc.entry.Close()
			return nil, fmt.Errorf("replace chain %d: %w", id, err)
		}
	}
	c.retire()
	c.entry, c.cur, c.l2, c.prog, c.slot = nc.entry, nc.cur, l2, prog, next
	c.spec.Select, c.spec.Act = selectExpr, actExpr
	return m.status(c), nil
}

// Release marks every ADD_ADDR a chain withheld for re-injection into the
// next packet of its subflow, and makes sure the chain sees those packets:
// its selector is widened (atomically) by the 4-tuples of the subflows
// concerned. It returns how many options were released.
func (m *Manager) Release(id uint32) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.chains[id]
	if !ok {
		return 0, fmt.Errorf("no chain %d", id)
	}
	var k stepsWithheldKey
	var v stepsWithheldVal
	type kv struct {
		k stepsWithheldKey
		v stepsWithheldVal
	}
	var todo []kv
	it := m.objs.MpsteerWithheld.Iterate()
	for it.Next(&k, &v) {
		if k.Chain == id && v.Release == 0 {
			todo = append(todo, kv{k, v})
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	if len(todo) == 0 {
		return 0, nil
	}
	sel := strings.TrimSpace(c.spec.Select)
	seen := map[string]bool{}
	var extra []string
	for _, e := range todo {
		src, dst, _ := strings.Cut(keySubflow(e.k), "→")
		t := fmt.Sprintf("tuple(src=%s, dst=%s)", src, dst)
		if !seen[t] && !strings.Contains(sel, t) {
			seen[t] = true
			extra = append(extra, t)
		}
	}
	if len(extra) > 0 && sel != "" {
		widened := "(" + sel + ") or " + strings.Join(extra, " or ")
		if _, err := m.replace(id, widened, c.spec.Act); err != nil {
			return 0, fmt.Errorf("widen chain %d to see the subflows to release into: %w", id, err)
		}
	}
	// Pending first: a packet that sees a released option must look.
	if err := m.objs.MpsteerReleasePending.Put(id, uint32(1)); err != nil {
		return 0, err
	}
	for _, e := range todo {
		e.v.Release = 1
		if err := m.objs.MpsteerWithheld.Put(&e.k, &e.v); err != nil {
			return 0, err
		}
	}
	return len(todo), nil
}

// List reports every chain with its counters.
func (m *Manager) List() []*ChainStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []uint32
	for id := range m.chains {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var out []*ChainStatus
	for _, id := range ids {
		out = append(out, m.status(m.chains[id]))
	}
	return out
}

func (m *Manager) status(c *chain) *ChainStatus {
	st := &ChainStatus{ChainSpec: c.spec, Ifindex: c.ifindex}
	// One program: its run time covers the chain (loaded actors are
	// reached by tail calls, which do not return).
	st.CPUTimeNs = c.runtime()
	var per []stepsMpsteerStats
	if err := m.objs.MpsteerStats.Lookup(c.spec.ID, &per); err == nil {
		for _, s := range per {
			st.Seen += s.Seen
			st.Selected += s.Selected
			st.Bytes += s.Bytes
			st.Modified += s.Modified
			st.Dropped += s.Dropped
			st.Skipped += s.Skipped
			st.Errors += s.Errors
			if s.FirstNs != 0 && (st.FirstNs == 0 || s.FirstNs < st.FirstNs) {
				st.FirstNs = s.FirstNs
			}
		}
	}
	for i, s := range c.prog.Steps {
		sc := StepCount{Text: s.Text, Program: s.Prog}
		var counts [][2]uint64
		if m.objs.MpsteerStepCount.Lookup(c.slot*MaxSteps+uint32(i), &counts) == nil {
			for _, v := range counts {
				sc.Packets += v[0]
				sc.Bytes += v[1]
			}
		}
		st.Steps = append(st.Steps, sc)
	}
	var k stepsWithheldKey
	var v stepsWithheldVal
	it := m.objs.MpsteerWithheld.Iterate()
	for it.Next(&k, &v) {
		if k.Chain != c.spec.ID {
			continue
		}
		st.Withheld = append(st.Withheld, Withheld{AddrID: k.AddrId, Subflow: keySubflow(k),
			Option: fmt.Sprintf("%x", v.Opt[:min(int(v.Len), len(v.Opt))]), Released: v.Release != 0})
	}
	return st
}

func keySubflow(k stepsWithheldKey) string {
	addr := func(w [4]uint32) netip.Addr {
		var b [16]byte
		for i, x := range w {
			b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
		}
		if k.V6 == 0 {
			return netip.AddrFrom4([4]byte(b[:4]))
		}
		return netip.AddrFrom16(b)
	}
	port := func(p uint16) uint16 { return p<<8 | p>>8 }
	return fmt.Sprintf("%s→%s", netip.AddrPortFrom(addr(k.Saddr), port(k.Sport)), netip.AddrPortFrom(addr(k.Daddr), port(k.Dport)))
}

// LoadActor loads a user's actor from a BPF object: its tc program is
// checked by the verifier like ours, shares our maps, and becomes usable
// as name(args) in chains.
func (m *Manager) LoadActor(objFile, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !actorNameRE(name) {
		return fmt.Errorf("actor name %q is not valid (letters, digits and _, starting with a letter)", name)
	}
	for _, b := range BuiltinActors {
		if b == name {
			return fmt.Errorf("%q is a built-in actor", name)
		}
	}
	if _, ok := m.user[name]; ok {
		return fmt.Errorf("an actor named %q is loaded already", name)
	}
	if _, err := os.Stat(objFile); err != nil {
		return err
	}
	spec, err := ebpf.LoadCollectionSpec(objFile)
	if err != nil {
		return fmt.Errorf("%s: %w", objFile, err)
	}
	var progName string
	for n, p := range spec.Programs {
		if p.Type == ebpf.SchedCLS {
			if progName != "" {
				return fmt.Errorf("%s has more than one tc program (%s, %s): one actor per object", objFile, progName, n)
			}
			progName = n
		}
	}
	if progName == "" {
		return fmt.Errorf("%s has no SEC(\"tc\") program", objFile)
	}
	if at := spec.Programs[progName].AttachType; at != ebpf.AttachNone {
		return fmt.Errorf("%s: the program must be in SEC(\"tc\") (it is tail-called from chains on both hooks), not %s", objFile, at)
	}
	repl := map[string]*ebpf.Map{}
	for n, mp := range m.sharedMaps() {
		if _, ok := spec.Maps[n]; ok {
			repl[n] = mp
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		return fmt.Errorf("%s: %w", objFile, bpfutil.VerifierDetail(err))
	}
	prog := coll.DetachProgram(progName)
	coll.Close()
	idx := uint32(userBase + len(m.user))
	if idx >= 64 {
		prog.Close()
		return errors.New("no room for more loaded actors")
	}
	if err := m.objs.MpsteerSteps.Put(idx, prog); err != nil {
		prog.Close()
		return fmt.Errorf("%s: cannot join the step array (is it a plain SEC(\"tc\") program?): %w", objFile, err)
	}
	m.user[name] = prog
	m.index["user:"+name] = idx
	return nil
}

func actorNameRE(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// AddDetached prepares a chain without attaching it to a device, for
// BPF_PROG_TEST_RUN: the returned entry program runs the chain on packets
// given to it (they start with an Ethernet header, l2len 14).
func (m *Manager) AddDetached(selectExpr, actExpr string) (uint32, *ebpf.Program, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prog, err := Compile(selectExpr, actExpr, m.userNames())
	if err != nil {
		return 0, nil, err
	}
	var id uint32
	for i := uint32(1); i < MaxChains; i++ {
		if _, used := m.chains[i]; !used {
			id = i
			break
		}
	}
	if id == 0 {
		return 0, nil, errors.New("no free chain id")
	}
	c := &chain{spec: ChainSpec{ID: id, Dev: "(test run)", Hook: Ingress, Select: selectExpr, Act: actExpr}, prog: prog, l2: 14, slot: id * 2}
	if err := m.prepare(c, c.slot, prog); err != nil {
		return 0, nil, err
	}
	if !m.pinned {
		m.resetStats(id)
	}
	m.chains[id] = c
	return id, c.entry, nil
}

// program is a chain's current program (for tests that run it).
func (m *Manager) program(id uint32) *ebpf.Program {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.chains[id]; ok {
		return c.entry
	}
	return nil
}

// Status reports one chain.
func (m *Manager) Status(id uint32) (*ChainStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.chains[id]
	if !ok {
		return nil, fmt.Errorf("no chain %d", id)
	}
	return m.status(c), nil
}

// Move places a chain before or after another chain of its hook. A new
// instance of the chain's program is loaded and attached at the new place;
// while the two links swap, the chain is paused (packets pass untouched)
// rather than run twice.
func (m *Manager) Move(id, before, after uint32) (*ChainStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.chains[id]
	if !ok || c.link == nil {
		return nil, fmt.Errorf("no chain %d", id)
	}
	ref, place := before, "before"
	if ref == 0 {
		ref, place = after, "after"
	}
	other, ok := m.chains[ref]
	if !ok || ref == id || other.link == nil || other.ifindex != c.ifindex || other.spec.Hook != c.spec.Hook {
		return nil, fmt.Errorf("chain %d is not another chain on %s %s", ref, c.spec.Dev, c.spec.Hook)
	}
	anchor := link.AfterLink(other.link)
	if place == "before" {
		anchor = link.BeforeLink(other.link)
	}
	attach := ebpf.AttachTCXIngress
	if c.spec.Hook == Egress {
		attach = ebpf.AttachTCXEgress
	}
	// A program is attached at most once per hook: a second instance,
	// loaded (and verified) paused, before the chain pauses.
	np, err := m.loadChain(id, c.slot, c.l2, c.prog, true)
	if err != nil {
		return nil, err
	}
	if err := c.cur.pause(true); err != nil {
		np.prog.Close()
		return nil, err
	}
	nl, err := link.AttachTCX(link.TCXOptions{Interface: c.ifindex, Program: np.prog, Attach: attach, Anchor: anchor})
	if err != nil {
		np.prog.Close()
		c.cur.pause(false)
		return nil, fmt.Errorf("move chain %d %s %d: %w", id, place, ref, err)
	}
	c.link.Close()
	c.link = nl
	c.retire()
	c.entry, c.cur = np.prog, np
	if np.user {
		m.objs.MpsteerResumes.Put(c.slot, np.prog)
	}
	c.spec.Before, c.spec.After = before, after
	if err := np.pause(false); err != nil {
		return nil, err
	}
	return m.status(c), nil
}

// ensureBPFFS makes sure dir is on a bpffs (pins live only there) and
// exists. /sys/fs/bpf is mounted when it is not yet; anywhere else the
// caller must mount one (a mount made inside `ip netns exec` would die
// with that command's mount namespace).
func ensureBPFFS(dir string) error {
	onBPFFS := func(p string) bool {
		var st unix.Statfs_t
		return unix.Statfs(p, &st) == nil && st.Type == unix.BPF_FS_MAGIC
	}
	// The nearest existing ancestor tells which filesystem dir will be on.
	p := filepath.Clean(dir)
	for {
		if _, err := os.Stat(p); err == nil || p == "/" {
			break
		}
		p = filepath.Dir(p)
	}
	if !onBPFFS(p) {
		const std = "/sys/fs/bpf"
		if dir != std && !strings.HasPrefix(filepath.Clean(dir), std+"/") {
			return fmt.Errorf("persist: %s is not on a bpffs; mount one first (mount -t bpf bpf DIR) or use a directory under %s", dir, std)
		}
		if err := unix.Mount("bpf", std, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("persist: mount bpffs on %s: %w", std, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	return nil
}
