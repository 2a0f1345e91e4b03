#!/usr/bin/env bash
# Runs the matrix's tests (tests.txt) on the kernel it boots in, as root:
# inside a virtme-ng guest, or on the host for the host's kernel. Usage:
# guest.sh vm|host BUILD OUT [TESTS]: BUILD holds the compiled test
# binaries (PKG.test, with / in PKG as _), mpsteer and test2json; OUT gets
# one test2json stream per package (PKG.json), doctor.json and guest.log.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
where=$1 build=$2 out=$3 tests=${4:-$here/tests.txt}
mkdir -p "$out"
exec 3>>"$out/guest.log"
log() { echo "$*" >&3; }
log "kernel $(uname -r)"

# A guest is set up as the host is (modules loaded, cgroup2 and bpffs
# mounted, the kernel's config in /boot); the host is left as it is.
if [[ $where == vm ]]; then
	# What the tests need that a guest's kernel has as modules (built in on
	# some kernels: a failed modprobe is only logged).
	for m in veth tun sch_ingress cls_bpf sch_htb sch_tbf sch_netem act_police tcp_bbr mac80211_hwsim; do
		[[ $m == mac80211_hwsim ]] && continue # the Wi-Fi test loads it with its own radios
		modprobe -q "$m" 2>&3 || log "modprobe $m failed"
	done
	[[ -e /dev/net/tun ]] || { mkdir -p /dev/net; mknod /dev/net/tun c 10 200; }
	grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup 2>&3 || log "mount cgroup2 failed"
	grep -q ' /sys/fs/bpf bpf ' /proc/mounts || mount -t bpf bpf /sys/fs/bpf 2>&3 || log "mount bpffs failed"
	# A distribution's kernel has its config in /boot, which programs with
	# .kconfig externs read (libbpf's rule): in a guest /boot is the host's,
	# so the unpacked package's own boot/ is put there.
	kdir=$(readlink -f "/lib/modules/$(uname -r)" 2>/dev/null || true)
	while [[ -n $kdir && $kdir != / && ! -e $kdir/boot/config-$(uname -r) ]]; do kdir=$(dirname "$kdir"); done
	if [[ ! -e /boot/config-$(uname -r) && -n $kdir && $kdir != / ]]; then
		mount --bind "$kdir/boot" /boot 2>&3 || log "bind the kernel's boot/ over /boot failed"
	fi
	mkdir -p /run/netns /run/mpsteer
	ip link set lo up 2>&3
fi

"$build/mpsteer" doctor --json > "$out/doctor.json" 2>&3 || log "doctor failed"

export MPSTEER_BIN=$build/mpsteer MPSTEER_REQUIRE_PRIVILEGED=1 GOTRACEBACK=all
timeout=${MPSTEER_KERNEL_TEST_TIMEOUT:-10m}
grep -v '^#' "$tests" | while read -r pkg pattern; do
	[[ -n $pkg ]] || continue
	bin=$build/${pkg//\//_}.test
	log "run $pkg $pattern"
	start=$(date +%s)
	# In the package's directory, as go test runs it (testdata, relative paths).
	(cd "$root/$pkg" && "$build/test2json" -t -p "mpsteer/$pkg" "$bin" -test.v=test2json -test.count=1 \
		-test.run "$pattern" -test.timeout "$timeout") > "$out/${pkg//\//_}.json" 2>&3
	log "done $pkg: exit $? in $(( $(date +%s) - start )) s"
done
log "end"
