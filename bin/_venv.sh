# Sourced by bin/deploy and bin/test: make .venv (once) and install the pinned requirements into it.
# Usage: ensure_venv REQUIREMENTS_FILE
ensure_venv() {
    local reqs=$1
    if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        echo "setup: python3 cannot make virtual environments; installing python3-venv" >&2
        ${SUDO:-} apt-get install -y -q python3-venv >/dev/null || {
            echo "setup: run 'sudo apt-get install python3-venv' and try again" >&2; return 1; }
    fi
    [ -x .venv/bin/python ] || python3 -m venv .venv
    # Reinstall only when the requirements changed: a no-op run stays fast.
    local stamp=.venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$(basename "$reqs")
    if [ ! -e "$stamp" ]; then
        .venv/bin/python -m pip install -q --disable-pip-version-check -r "$reqs"
        touch "$stamp"
    fi
}
[ "$(id -u)" = 0 ] || SUDO=sudo

# The Debian packages the sandbox rig needs on this machine (tests/sandbox/host-packages.txt), installed
# when missing. Says in one line what it needs where it cannot install them (no apt, no root or sudo).
# Usage: ensure_host_tools WHO   (WHO names the caller in messages: deploy, test)
ensure_host_tools() {
    local who=$1 missing p
    missing=$(for p in $(grep -v '^#' tests/sandbox/host-packages.txt); do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"; done)
    [ -z "$missing" ] && return 0
    missing=$(echo $missing)
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$who: the simulated rig needs a Debian or Ubuntu machine with: $missing" >&2; return 1
    fi
    if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null 2>&1; then
        echo "$who: the simulated rig needs these packages; as root run: apt-get install $missing" >&2; return 1
    fi
    echo "$who: installing host tools for the simulated rig: $missing" >&2
    ${SUDO:-} apt-get update -q >/dev/null
    # shellcheck disable=SC2086
    ${SUDO:-} apt-get install -y -q $missing >/dev/null || {
        echo "$who: could not install $missing; run 'sudo apt-get install $missing' and try again" >&2; return 1; }
    # Debian's fcgiwrap enables a system-wide CGI socket; the sandbox runs its own behind its nginx only.
    if [[ " $missing " == *" fcgiwrap "* ]] && command -v systemctl >/dev/null 2>&1; then
        ${SUDO:-} systemctl disable --now fcgiwrap.socket >/dev/null 2>&1 || true
    fi
}
