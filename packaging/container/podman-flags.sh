# Sourced by scripts/build-image and scripts/test-image: sets PODMAN_FLAGS, the flags `podman
# build` and `podman run` need on this machine, found by trying IMAGE with the defaults first.
#
# Why: on the project's CI VM (Debian 12, podman 4.3, cgroup v1 with a hugetlb controller left on
# the v2 hierarchy) the default runtime, crun 1.8, refuses every container with "cgroups in hybrid
# mode not supported, drop all controllers from cgroupv2"; runc 1.1 runs them. And root there lacks
# CAP_SYS_RESOURCE, so podman's default rlimits (nofile 1048576, nproc at the maximum) fail with
# "error setting rlimit ... operation not permitted": the limits are set below the shell's hard
# ones (an rlimit at the hard limit itself was refused too). On a usual machine the defaults work
# and PODMAN_FLAGS stays empty.
podman_flags_for() {
  local image="$1" hard_n
  PODMAN_FLAGS=()
  if podman run --rm --pull=never "$image" true >/dev/null 2>&1; then
    return 0
  fi
  hard_n=$(ulimit -Hn)
  [[ $hard_n == unlimited ]] && hard_n=1048576
  ((hard_n > 65537)) && hard_n=65537
  PODMAN_FLAGS=(--runtime runc --ulimit "nofile=$((hard_n - 1)):$((hard_n - 1))" --ulimit nproc=4096:4096)
  if ! podman run --rm --pull=never "${PODMAN_FLAGS[@]}" "$image" true >/dev/null 2>&1; then
    echo "podman cannot run a container here, with the defaults or with ${PODMAN_FLAGS[*]}:" >&2
    podman run --rm --pull=never "${PODMAN_FLAGS[@]}" "$image" true >&2 || true
    return 1
  fi
}
