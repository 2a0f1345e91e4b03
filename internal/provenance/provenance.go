// Package provenance records where a data file came from: the commit the
// binary was built from (and whether its tree had changes), the command
// line, the kernel, the host and when the measurement started and ended.
// Every results file the lab and the benchmarks write carries it.
package provenance

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Provenance is the "provenance" object of a results file.
type Provenance struct {
	// Version is the binary's version string (0.1.0+git803c952 when
	// built by make).
	Version string `json:"version,omitempty"`
	// Commit is the short hash the binary was built from: from its
	// version string (+git<hash>), else from the build's VCS stamp, else
	// the HEAD of the git checkout it runs in ("" when none of these);
	// Dirty says the tree had changes (the build's stamp, or `git status`
	// of that checkout when its HEAD is the commit).
	Commit string `json:"commit"`
	Dirty  bool   `json:"dirty"`
	// Command is the command line, as a shell would take it.
	Command string `json:"command"`
	// Kernel is the running kernel's release (uname -r).
	Kernel string `json:"kernel"`
	// Date and Finished: start and end, UTC, RFC 3339.
	Date     string `json:"date"`
	Finished string `json:"finished,omitempty"`
	// Host is left out when none was recorded (legacy data).
	Host Host `json:"host,omitzero"`
	// Legacy is set on data converted from files recorded before
	// provenance was kept (internal/docs/legacy says what it holds then);
	// what was not recorded then says "unknown".
	Legacy string `json:"legacy,omitempty"`
	// Sources are the files such data were converted from.
	Sources []string `json:"sources,omitempty"`
}

// Host is the machine that measured.
type Host struct {
	CPUs     int    `json:"cpus"`
	Hostname string `json:"hostname"`
}

var gitInVersion = regexp.MustCompile(`\+git([0-9a-f]{7,40})`)

// Collect records the provenance of a measurement that starts now.
// version is the binary's version string; args its command line (os.Args).
func Collect(version string, args []string) Provenance {
	p := Provenance{Version: version, Command: Command(args), Kernel: kernel(), Date: Now()}
	p.Host.CPUs = runtime.NumCPU()
	p.Host.Hostname, _ = os.Hostname()
	modified := false
	if m := gitInVersion.FindStringSubmatch(version); m != nil {
		p.Commit = m[1]
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if p.Commit == "" {
					p.Commit = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if p.Commit == "" {
		// A binary built without either (go build with -buildvcs=false)
		// run from a checkout: that checkout is most likely its source.
		if head, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
			p.Commit = strings.TrimSpace(string(head))
		}
	}
	if len(p.Commit) > 12 {
		p.Commit = p.Commit[:12]
	}
	p.Dirty = modified || checkoutDirty(p.Commit)
	return p
}

// Check reports what a provenance lacks ("" when it is complete): the
// commit, the command, the kernel and the date are required; legacy data
// may say "unknown" for what was not recorded, and must say it is legacy.
func (p *Provenance) Check() string {
	if p == nil {
		return "no provenance (commit, command, kernel, date)"
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"commit", p.Commit}, {"command", p.Command}, {"kernel", p.Kernel}, {"date", p.Date}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return "provenance without " + strings.Join(missing, ", ")
	}
	if p.Legacy == "" {
		for _, v := range []string{p.Commit, p.Kernel, p.Date} {
			if v == "unknown" {
				return "provenance says \"unknown\" but is not marked legacy"
			}
		}
	}
	return ""
}

// Summary says in a few words where the numbers come from, for the
// documents: "commit 803c952, kernel 6.18.44, 2026-11-26", or for legacy
// data "legacy (recorded before provenance was kept): commit 4593a5c,
// 2026-11-23".
func (p *Provenance) Summary() string {
	var parts []string
	if p.Commit != "" && p.Commit != "unknown" {
		c := "commit " + p.Commit
		if p.Dirty {
			c += " (with uncommitted changes)"
		}
		parts = append(parts, c)
	}
	if p.Kernel != "" && p.Kernel != "unknown" {
		parts = append(parts, "kernel "+p.Kernel)
	}
	if p.Date != "" && p.Date != "unknown" {
		d := p.Date
		if len(d) > 10 && d[4] == '-' && d[10] == 'T' {
			d = d[:10]
		}
		parts = append(parts, d)
	}
	s := strings.Join(parts, ", ")
	if p.Legacy != "" {
		if s == "" {
			return "legacy (" + p.Legacy + ")"
		}
		return "legacy (" + p.Legacy + "): " + s
	}
	return s
}

// Finish records the end of the measurement.
func (p *Provenance) Finish() { p.Finished = Now() }

// Now is the time in the form the dates take.
func Now() string { return time.Now().UTC().Format(time.RFC3339) }

// checkoutDirty: run from a git checkout of the commit the binary came
// from (the usual `make` then `bin/mpsteer ...`), whether `git status`
// shows changes to tracked files. Untracked files (results being written)
// do not count. Anywhere else: false.
func checkoutDirty(commit string) bool {
	if commit == "" {
		return false
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(head)), commit) {
		return false
	}
	out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	return err == nil && len(bytes.TrimSpace(out)) > 0
}

func kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Command renders a command line: the program's base name, then the
// arguments, quoted where a shell would need it.
func Command(args []string) string {
	if len(args) == 0 {
		return ""
	}
	out := []string{filepath.Base(args[0])}
	for _, a := range args[1:] {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
			a = strconv.Quote(a)
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

// Attach returns v as indented JSON with "provenance" as its first key
// (v's own keys follow in their order). A v that is not a JSON object is
// put under "results".
func Attach(v any, p Provenance) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	prov, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	body = bytes.TrimSpace(body)
	switch {
	case len(body) > 0 && body[0] == '{':
		b.WriteString(`{"provenance":`)
		b.Write(prov)
		if rest := bytes.TrimSpace(body[1:]); len(rest) > 0 && rest[0] != '}' {
			b.WriteByte(',')
		}
		b.Write(body[1:])
	default:
		b.WriteString(`{"provenance":`)
		b.Write(prov)
		b.WriteString(`,"results":`)
		b.Write(body)
		b.WriteByte('}')
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}
