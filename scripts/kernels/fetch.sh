#!/usr/bin/env bash
# Downloads the kernels of the test matrix once into a cache outside the
# checkout (MPSTEER_KERNEL_CACHE, default /var/lib/mpsteer/kernels: not under
# /var/cache, which virtme-ng hides from the guest behind a tmpfs) and
# unpacks each beside its modules: CACHE/NAME/boot/vmlinuz-VERSION and
# CACHE/NAME/lib/modules/VERSION, as virtme-ng wants them. Nothing is
# installed as the host's kernel: the packages come through a private
# APT_CONFIG (its own sources, lists and archives under the cache) and are
# only unpacked with dpkg-deb -x. A second run downloads nothing.
#
# The matrix (NAME SUITE PACKAGE-PATTERN):
#   debian12      bookworm            linux-image-6.1.0-*-amd64-unsigned
#   debian12-bpo  bookworm-backports  linux-image-6.12.*+deb12-amd64-unsigned
#   debian13      trixie              linux-image-*+deb13-amd64-unsigned (only when
#                                     its major.minor differs from the backports
#                                     one, which follows Debian 13's kernel, or
#                                     when asked for by name: fetch.sh debian13)
# Prints one line per kernel: NAME VERSION DIR.
set -euo pipefail

cache=${MPSTEER_KERNEL_CACHE:-/var/lib/mpsteer/kernels}
mirror=${MPSTEER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
apt=$cache/apt
mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/etc/preferences.d" "$apt/state"

cat > "$apt/etc/sources.list" <<SRC
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-backports main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main
SRC
: > "$apt/state/status"
cat > "$apt/apt.conf" <<CONF
Dir::Etc::SourceList "$apt/etc/sources.list";
Dir::Etc::SourceParts "/nonexistent";
Dir::Etc::Preferences "/nonexistent";
Dir::Etc::PreferencesParts "$apt/etc/preferences.d";
Dir::State "$apt/state";
Dir::State::Lists "$apt/lists";
Dir::State::status "$apt/state/status";
Dir::Cache "$apt/cache";
Dir::Cache::archives "$apt/archives";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
APT::Get::List-Cleanup "0";
Debug::NoLocking "1";
APT::Sandbox::User "root";
Acquire::IndexTargets::deb::DEP-11::DefaultEnabled "false";
Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled "false";
Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled "false";
CONF
export APT_CONFIG=$apt/apt.conf
mkdir -p "$apt/cache"

# The lists are refreshed once a day at most (a kernel that was unpacked
# stays whatever the lists say later).
stamp=$apt/lists/.updated
if [[ ! -e $stamp || -n $(find "$stamp" -mmin +1440) ]]; then
	apt-get update -q -o APT::Update::Error-Mode=any >&2
	touch "$stamp"
fi

# newest SUITE REGEX: the newest package name in SUITE matching REGEX.
newest() {
	local suite=$1 re=$2 best="" bestver="" p v
	while read -r p; do
		v=$(apt-cache show "$p/$suite" 2>/dev/null | sed -n 's/^Version: //p' | head -1)
		[[ -n $v ]] || continue
		if [[ -z $best ]] || dpkg --compare-versions "$v" gt "$bestver"; then best=$p; bestver=$v; fi
	done < <(apt-cache pkgnames linux-image- | grep -E "$re" | sort -u)
	[[ -n $best ]] || { echo "kernels: no package matching $re in $suite at $mirror" >&2; return 1; }
	echo "$best"
}

# unpack NAME SUITE PACKAGE: the package's kernel and modules in CACHE/NAME.
unpack() {
	local name=$1 suite=$2 pkg=$3 dir=$cache/$1 ver deb
	ver=${pkg#linux-image-}; ver=${ver%-unsigned}
	if [[ -e $dir/.done && $(cat "$dir/.done") == "$pkg" ]]; then
		echo "$name $ver $dir"; return
	fi
	rm -rf "$dir"; mkdir -p "$dir"
	(cd "$apt/archives" && apt-get download -q "$pkg/$suite" >&2)
	deb=$(ls -t "$apt/archives/${pkg}"_*.deb | head -1)
	dpkg-deb -x "$deb" "$dir"
	# Debian 13's packages put the modules under usr/ (merged /usr).
	[[ -e $dir/lib || ! -d $dir/usr/lib/modules ]] || ln -s usr/lib "$dir/lib"
	[[ -e $dir/boot/vmlinuz-$ver && -d $dir/lib/modules/$ver ]] || { echo "kernels: $deb has no boot/vmlinuz-$ver with its modules" >&2; return 1; }
	# depmod's files are not in the package (its postinst makes them).
	depmod -b "$dir" "$ver"
	echo "$pkg" > "$dir/.done"
	rm -f "$deb"
	echo "$name $ver $dir"
}

only=${1:-}
want() { [[ -z $only || ,$only, == *",$1,"* ]]; }
want debian12 && unpack debian12 bookworm "$(newest bookworm '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$')"
bpo=$(newest bookworm-backports '^linux-image-6\.12\.[0-9.+~a-z-]*deb12[0-9.+~a-z-]*-amd64-unsigned$')
want debian12-bpo && unpack debian12-bpo bookworm-backports "$bpo"
trixie=$(newest trixie '^linux-image-[0-9.]+[0-9.+~a-z-]*deb13[0-9.+~a-z-]*-amd64-unsigned$')
if want debian13; then
	line() { local v=${1#linux-image-}; echo "${v%.*}"; } # 6.12.95+deb12-… → 6.12
	if [[ -z $only && $(line "${trixie%%+*}") == $(line "${bpo%%+*}") ]]; then
		echo "kernels: Debian 13's kernel ($trixie) is the $(line "${trixie%%+*}") line the backports one ($bpo) follows: not run twice (MPSTEER_KERNELS=debian13 runs it)" >&2
	else
		unpack debian13 trixie "$trixie"
	fi
fi
