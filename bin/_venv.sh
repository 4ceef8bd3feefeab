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
