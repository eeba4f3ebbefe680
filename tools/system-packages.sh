#!/bin/sh
# The system packages the tests need, by part: sandbox (bubblewrap, slirp4netns, iproute2),
# postgres (the server's binaries), browser (Debian's chromium, its chromedriver and its
# headless shell).
#
#   tools/system-packages.sh sandbox postgres browser
#
# A part already on the machine costs nothing. The missing ones are installed together, where
# we may (root with apt-get, as in CI): one `apt-get update` and one `apt-get install`. apt and
# dpkg take a lock each; three installs started side by side (make's jobserver ran the three
# targets at once) failed on it now and then, and one part's tests then failed for a missing
# browser. So there is one install, and it waits for a lock held by anyone else (the machine's
# own apt at boot) instead of failing at once. Where a part cannot be installed its tests say
# why: skipped, or failed under CI=true.
set -u

LOCK_WAIT=300
missing=
what=

for part in "$@"; do
	case "$part" in
	sandbox)
		if command -v bwrap >/dev/null 2>&1 && command -v slirp4netns >/dev/null 2>&1 \
			&& command -v ip >/dev/null 2>&1; then continue; fi
		missing="$missing bubblewrap slirp4netns iproute2"
		what="$what, bubblewrap, slirp4netns and iproute2 (agy's per-thread sandbox)" ;;
	postgres)
		if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1
		then continue; fi
		missing="$missing postgresql"
		what="$what, postgresql (the shared store's tests)" ;;
	browser)
		if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] \
			&& [ -x /usr/lib/chromium/chromium-headless-shell ]; then continue; fi
		missing="$missing chromium chromium-driver chromium-headless-shell"
		what="$what, chromium, chromium-driver and chromium-headless-shell (the console's browser tests)" ;;
	*)
		echo "system-packages: unknown part '$part' (sandbox, postgres, browser)" >&2
		exit 2 ;;
	esac
done

[ -n "$missing" ] || exit 0
what=${what#, }

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "missing and not installable here (needs root and apt-get): $what;"
	echo "their tests will not run (pytest lists them as skipped)"
	exit 0
fi

# `apt-get update` takes the lists' lock, which DPkg::Lock::Timeout does not wait for: it is
# tried again while someone else holds it.
update() {
	tries=0
	until apt-get update -qq; do
		tries=$((tries + 1))
		[ "$tries" -lt 30 ] || return 1
		sleep 2
	done
}

echo "installing $what"
# shellcheck disable=SC2086  # the package names are words
if update && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	-o DPkg::Lock::Timeout=$LOCK_WAIT --no-install-recommends $missing >/dev/null; then
	exit 0
fi
echo "could not install $what: their tests will not run"
exit 0
