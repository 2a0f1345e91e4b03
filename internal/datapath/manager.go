package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"mpsteer/internal/bpfutil"
)

// Manager owns the shared maps, the loaded actors and the chains (one
// program each) of one network namespace. Closing it detaches every
// chain: packets flow as if mpsteer were not there (fail open).
//
// Changes to chains (add, replace, move, release, delete, load an actor)
// take m.ops, one at a time; they build and verify programs (milliseconds,
// tens for a long chain) holding only it. What List and Status read (the
// chains and their programs) changes only under m.mu as well, taken to
// attach, swap and detach: the daemon's metrics, which list the chains
// while holding the daemon's own lock, never wait for a build.
type Manager struct {
	ops       sync.Mutex
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
	noKfuncs  bool   // build clamp_rwnd and set_backup without the kfuncs of 6.2
	// mode is how chains are attached: AttachAuto until the first
	// attachment finds out; clsact the devices with chains on tc.
	mode   AttachMode
	clsact map[string]*clsactDev
	lease  *lease // held while chains may sit on clsact (lease.go)
	// loadHook, when set (by tests), is called as a chain's program is
	// about to be built and verified; tcxHook attaches in place of
	// link.AttachTCX (a kernel without TCX).
	loadHook func()
	tcxHook  func(link.TCXOptions) (link.Link, error)
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
	// WithoutKfuncs builds chains as for a kernel without the kfuncs of
	// 6.2 (bpf_cast_to_kern_ctx, bpf_rdonly_cast), as on Debian 12's
	// 6.1, which is what a manager does where the kernel lacks them:
	// tests run that way on any kernel.
	WithoutKfuncs bool
	// Attach chooses how chains are attached: TCX (kernels from 6.6),
	// a tc clsact filter, or (AttachAuto, the default) TCX where the
	// kernel has it and tc where it has not. AttachEnv overrides
	// AttachAuto.
	Attach AttachMode
}

// persistentMaps hold state keyed by chain id; the others (descriptors,
// program array) are rebuilt by every process.
var persistentMaps = []string{"mpsteer_withheld", "mpsteer_stats", "mpsteer_step_count", "mpsteer_release_ids", "mpsteer_released_ids", "mpsteer_release_count"}

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
		if !strings.HasPrefix(name, "mpsteer_chain") {
			delete(chainSpec.Programs, name)
		}
	}
	mode, err := attachModeFrom(o)
	if err != nil {
		return nil, err
	}
	m := &Manager{spec: spec, chainSpec: chainSpec, index: map[string]uint32{}, user: map[string]*ebpf.Program{}, chains: map[uint32]*chain{}, sockCache: 1,
		mode: mode, clsact: map[string]*clsactDev{}}
	if o.NoSocketCache {
		m.sockCache = 0
	}
	m.noKfuncs = o.WithoutKfuncs || !kernelHasKfuncs()
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
	m.ops.Lock()
	defer m.ops.Unlock()
	var errs error
	for id, c := range m.chains {
		if m.pinned {
			m.mu.Lock()
			errs = errors.Join(errs, m.detach(c))
			delete(m.chains, id)
			m.mu.Unlock()
			continue
		}
		errs = errors.Join(errs, m.del(id))
	}
	for _, p := range m.user {
		p.Close()
	}
	m.endLease()
	return errors.Join(errs, m.objs.Close())
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

func (m *Manager) sharedMaps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		"mpsteer_steps": m.objs.MpsteerSteps, "mpsteer_chains": m.objs.MpsteerChains,
		"mpsteer_stats": m.objs.MpsteerStats, "mpsteer_step_count": m.objs.MpsteerStepCount,
		"mpsteer_withheld":    m.objs.MpsteerWithheld,
		"mpsteer_release_ids": m.objs.MpsteerReleaseIds, "mpsteer_released_ids": m.objs.MpsteerReleasedIds,
		"mpsteer_release_count": m.objs.MpsteerReleaseCount, "mpsteer_resumes": m.objs.MpsteerResumes,
		"mpsteer_alive": m.objs.MpsteerAlive,
	}
}

func (m *Manager) userNames() map[string]bool {
	out := map[string]bool{}
	for k := range m.user {
		out[k] = true
	}
	return out
}

// MaxChains bounds chain ids (mirrors MPSTEER_MAX_CHAINS).
const MaxChains = 256

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

// kernelHasKfuncs reports whether the kernel has the kfuncs clamp_rwnd
// and set_backup use where they can (from 6.2).
func kernelHasKfuncs() bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false
	}
	for _, name := range []string{"bpf_cast_to_kern_ctx", "bpf_rdonly_cast"} {
		var fn *btf.Func
		if spec.TypeByName(name, &fn) != nil {
			return false
		}
	}
	return true
}
