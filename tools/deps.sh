# deps.sh - installs what gputrain needs on Debian/Ubuntu when it is missing (sourced by run.sh
# and test.sh). Needs root (or sudo) only when something is missing.
gt_install_deps() {
    local need=()
    command -v cmake >/dev/null || need+=(cmake)
    command -v make >/dev/null || need+=(make)
    command -v cc >/dev/null || need+=(gcc)
    [ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
    [ -f /usr/include/stb/stb_image.h ] || need+=(libstb-dev)
    # Open MPI: several hosts under mpirun (tests/cli_mpi.sh runs two processes on this machine).
    command -v mpirun >/dev/null || need+=(openmpi-bin)
    command -v mpicc >/dev/null || need+=(libopenmpi-dev)
    [ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ] || [ -f datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ] || need+=(dataset-fashion-mnist)
    [ ${#need[@]} -eq 0 ] && return 0
    if ! command -v apt-get >/dev/null; then
        echo "gputrain: please install: ${need[*]} (and see datasets/README.md for the data)" >&2
        return 1
    fi
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "gputrain: installing ${need[*]}" >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}
