#!/bin/sh
# Container init for the process kubelet (see sandbox.ts, which is its only caller).
#
#   container-init.sh HOSTNAME WORKDIR MOUNT_COUNT {SOURCE TARGET ro|rw}... -- COMMAND [ARG]...
#
# Runs inside the pod's network namespace and a fresh private mount + UTS namespace. It bind-mounts
# each SOURCE on TARGET (creating TARGET when missing: a directory for a directory source, an empty
# file otherwise), sets the hostname, changes to WORKDIR, then execs COMMAND in place so the pid the
# kubelet spawned is the container's process. An empty HOSTNAME or WORKDIR means "leave as is".
#
# Every value arrives as its own positional parameter and is only ever expanded inside double quotes:
# nothing here is evaluated, so user strings cannot become shell code.
#
# The environment is the container's own: dash imports it as exported variables, so this script keeps
# all of its state in function locals (restored on return) and assigns no global, except that it undoes
# what dash and cd add (PWD, OLDPWD). sandbox.ts refuses the names dash cannot carry through unchanged.
#
# Failures print "container-init: ..." on stderr (the container's log) and exit 125.

fail() {
  printf 'container-init: %s\n' "$*" >&2
  exit 125
}

# bind_mount SOURCE TARGET ro|rw
bind_mount() {
  local src tgt mode parent
  src=$1
  tgt=$2
  mode=$3
  [ -e "$src" ] || fail "mount source does not exist: $src"
  if [ -d "$src" ]; then
    command -p mkdir -p -- "$tgt" || fail "cannot create mountpoint directory: $tgt"
  elif [ ! -e "$tgt" ]; then
    parent=${tgt%/*}
    if [ -n "$parent" ]; then
      command -p mkdir -p -- "$parent" || fail "cannot create mountpoint parent: $parent"
    fi
    command -p touch -- "$tgt" || fail "cannot create mountpoint file: $tgt"
  fi
  command -p mount --bind -- "$src" "$tgt" || fail "bind mount failed: $src on $tgt"
  case $mode in
    ro) command -p mount -o remount,bind,ro -- "$tgt" || fail "read-only remount failed: $tgt" ;;
    rw) ;;
    *) fail "mount mode must be ro or rw, got: $mode" ;;
  esac
}

# setup "$@": everything before the exec. Returns with the shell in WORKDIR.
setup() {
  local host dir count had_oldpwd oldpwd
  [ $# -ge 5 ] || fail "usage: container-init.sh HOSTNAME WORKDIR MOUNT_COUNT {SOURCE TARGET MODE}... -- COMMAND..."
  host=$1
  dir=$2
  count=$3
  shift 3
  case $count in
    '' | *[!0-9]*) fail "mount count is not a number: $count" ;;
  esac
  while [ "$count" -gt 0 ]; do
    [ $# -ge 3 ] || fail "fewer mount arguments than the mount count says"
    bind_mount "$1" "$2" "$3"
    shift 3
    count=$((count - 1))
  done
  [ "$1" = "--" ] || fail "expected -- before the command, got: $1"
  [ $# -ge 2 ] || fail "no command given"
  if [ -n "$host" ]; then
    # No hostname(1) dependency: writing the sysctl sets the name of this (new) UTS namespace.
    printf '%s' "$host" >/proc/sys/kernel/hostname || fail "cannot set hostname: $host"
  fi
  # cd sets OLDPWD, and dash exports PWD on its own: put the container's environment back as given.
  had_oldpwd=${OLDPWD+yes}
  oldpwd=${OLDPWD-}
  if [ -n "$dir" ]; then
    cd "$dir" || fail "cannot change to working directory: $dir"
  fi
  unset PWD
  if [ "$had_oldpwd" = yes ]; then
    OLDPWD=$oldpwd
  else
    unset OLDPWD
  fi
}

setup "$@"
# Drop HOSTNAME WORKDIR MOUNT_COUNT, the mount triples and the "--" (all validated by setup).
shift $((4 + 3 * $3))
exec "$@"
