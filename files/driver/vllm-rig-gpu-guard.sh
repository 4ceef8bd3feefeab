#!/bin/sh
# vllm-rig boot-time GPU guard (oneshot, before the vLLM service). Settings: /etc/vllm-rig/gpu-guard.env.
#  1. the nvidia module exists for the running kernel (else rebuild it with DKMS) and is loaded;
#  2. wait until GPU_COUNT GPUs answer; 3. persistence mode held by nvidia-persistenced (started here
#  once the module is loaded; NVIDIA's legacy `nvidia-smi -pm 1` only where no daemon unit exists);
#  4. the power limit from the settings. The unit is PartOf the daemon: a restart of the daemon (which
#  drops persistence and, with it, the power limit) runs this again.
# Every failure ends with one journal line starting "vllm-rig-gpu-guard:" that says what to do.
set -u
GPU_COUNT=${GPU_COUNT:-2}
POWER_LIMIT_W=${POWER_LIMIT_W:-}
WAIT_S=${WAIT_S:-120}
kernel=$(uname -r)

die() { echo "vllm-rig-gpu-guard: $*" >&2; exit 1; }

if [ ! -d /sys/module/nvidia ]; then
    if ! modinfo -k "$kernel" nvidia >/dev/null 2>&1; then
        echo "vllm-rig-gpu-guard: no nvidia module for kernel $kernel; building it with DKMS"
        dkms autoinstall -k "$kernel" || die "DKMS could not build the nvidia module for $kernel (are linux-headers-$kernel installed?)"
    fi
    modprobe nvidia 2>/dev/null || true
fi

waited=0
while :; do
    seen=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    [ "$seen" -ge "$GPU_COUNT" ] && break
    # An upgrade within this boot (its postinst restarts the daemon, and this unit with it): no wait helps.
    nvidia-smi -L 2>&1 | grep -q 'version mismatch' && die "the loaded nvidia module is older than the installed driver: reboot"
    if [ "$waited" -ge "$WAIT_S" ]; then
        detail=$(nvidia-smi -L 2>&1 | head -1)
        # The open modules log why they refuse a card whose BAR1 cannot map its memory.
        bar1=$(journalctl -b --no-pager -o cat 2>/dev/null | grep -m1 'kbusIsStaticBar1Supported')
        [ -n "$bar1" ] && die "$seen of $GPU_COUNT GPUs visible: the open module refused a card ($bar1); set nvidia_driver_flavor=proprietary or enable Resizable BAR in the firmware"
        # The driver's own lines for a card it lost or could not bring up (vllm_rig/host/nvrm.py GUARD_PATTERN).
        gone=$(journalctl -k --no-pager -o cat 2>/dev/null | grep -E 'NVRM: Xid |has fallen off the bus|NVRM: fallen off the bus|RmInitAdapter failed|probe routine failed' | tail -n 2 | tr '\n' ' ')
        [ -n "$gone" ] && die "$seen of $GPU_COUNT GPUs visible; the kernel says: ${gone% }; power the box off (a cold boot), reseat the cards and their power cables"
        die "$seen of $GPU_COUNT GPUs visible after ${WAIT_S}s (nvidia-smi: ${detail:-no output}); check cards, power cables and 'dmesg | grep -i nvidia'"
    fi
    sleep 2
    waited=$((waited + 2))
done

if systemctl cat nvidia-persistenced.service >/dev/null 2>&1; then
    systemctl start nvidia-persistenced.service || die "nvidia-persistenced did not start (systemctl status nvidia-persistenced)"
    off=$(nvidia-smi --query-gpu=persistence_mode --format=csv,noheader | grep -vc Enabled)
    [ "$off" -eq 0 ] || die "nvidia-persistenced runs but $off GPU(s) have persistence mode off: its unit must run it with --persistence-mode (systemctl cat nvidia-persistenced)"
else
    nvidia-smi -pm 1 >/dev/null || die "could not enable persistence mode"
fi
if [ -n "$POWER_LIMIT_W" ]; then
    nvidia-smi -pl "$POWER_LIMIT_W" >/dev/null || die "the cards refused a power limit of ${POWER_LIMIT_W} W (see nvidia-smi -q -d POWER)"
fi
echo "vllm-rig-gpu-guard: $seen GPUs ready, persistence on${POWER_LIMIT_W:+, power limit ${POWER_LIMIT_W} W}"
