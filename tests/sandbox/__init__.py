"""The sandbox rig: a booted Debian 12 machine under systemd-nspawn plus fixture servers on loopback."""
