# deps.sh - installs what gputrain needs on Debian/Ubuntu when it is missing (sourced by run.sh
# and test.sh; `bash tools/deps.sh` runs it alone). Needs root (or sudo) only when something is
# missing.
gt_install_deps() {
    local need=()
    command -v cmake >/dev/null || need+=(cmake)
    command -v make >/dev/null || need+=(make)
    command -v cc >/dev/null || need+=(gcc)
    # help2man: the build makes a man page from --help where it is found (cmake --install puts it).
    command -v help2man >/dev/null || need+=(help2man)
    [ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
    [ -f /usr/include/stb/stb_image.h ] || need+=(libstb-dev)
    # Open MPI: several hosts under mpirun (tests/cli_mpi.sh runs two processes on this machine).
    command -v mpirun >/dev/null || need+=(openmpi-bin)
    command -v mpicc >/dev/null || need+=(libopenmpi-dev)
    [ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ] || [ -f datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ] || need+=(dataset-fashion-mnist)
    [ ${#need[@]} -eq 0 ] && { gt_install_python_deps; return; }
    if ! command -v apt-get >/dev/null; then
        echo "gputrain: please install: ${need[*]} (and see datasets/README.md for the data)" >&2
        return 1
    fi
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "gputrain: installing ${need[*]}" >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null &&
        gt_install_python_deps
}

# The Python side (tools/plot.py: matplotlib, which brings Pillow, with which gputrain_torch.py
# reads image folders; tools/gputrain_torch.py and its test: numpy), for the python3 on PATH:
# Debian's packages where that is Debian's /usr/bin/python3, else pip for that
# very interpreter (a pyenv or venv Python does not see Debian's packages). A failure here is
# reported and left to the tools that need the module; the build and the C tests do not.
gt_install_python_deps() {
    command -v python3 >/dev/null || { echo "gputrain: no python3; the charts and the Python loader need it" >&2; return 0; }
    local mods=() debs=() m
    for m in numpy matplotlib; do
        python3 -c "import $m" >/dev/null 2>&1 || { mods+=("$m"); debs+=("python3-$m"); }
    done
    [ ${#mods[@]} -gt 0 ] || return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "gputrain: installing Python modules ${mods[*]} for $(command -v python3)" >&2
    if [ "$(readlink -f "$(command -v python3)")" = "$(readlink -f /usr/bin/python3 2>/dev/null)" ] && command -v apt-get >/dev/null; then
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}" >/dev/null && return 0
    fi
    python3 -m pip install -q "${mods[@]}" ||
        python3 -m pip install -q --user "${mods[@]}" ||
        echo "gputrain: could not install ${mods[*]} for python3 (python3 -m pip install ${mods[*]}); charts and the Python loader test need them" >&2
    return 0
}

# Run, not sourced: install and report.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    case "${1:-}" in
        --help) echo "usage: bash tools/deps.sh   (installs what gputrain needs when it is missing; Debian/Ubuntu)"; exit 0 ;;
        "") ;;
        *) echo "deps: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    cd "$(dirname "$0")/.."
    gt_install_deps
fi
